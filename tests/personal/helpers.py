"""Rows for the personal-variable tests: configs and installed skills with declarations."""

from __future__ import annotations

import uuid

from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig
from tests.sweeps.routes import make_installed_skill, make_sandbox_config

ME = "/api/v1/me/env-vars"


def config(tenant, name: str | None = None) -> str:
    config_id = make_sandbox_config(tenant)
    if name:
        db.session.get(SandboxConfig, config_id).name = name
        db.session.commit()
    return config_id


def skill(tenant, config_id: str, envs: list[dict], values: dict[str, str] | None = None,
          name: str | None = None, **fields) -> InstalledSkill:
    """A ready installed skill on `config_id` declaring `envs` with admin `values`."""
    row = db.session.get(InstalledSkill, make_installed_skill(tenant, config_id))
    row.envs, row.env_values = envs, values or {}
    if name:
        row.name = name
    for key, value in fields.items():
        setattr(row, key, value)
    db.session.commit()
    return row


def declare(*names: str, required: bool = False) -> list[dict]:
    return [{"name": n, "description": f"{n} for tests", "required": required} for n in names]


def unready(row: InstalledSkill, **fields) -> None:
    for key, value in ({"status": InstallStatus.failed} | fields).items():
        setattr(row, key, value)
    db.session.commit()


def new_id() -> str:
    return str(uuid.uuid4())
