"""Values planted in encrypted columns, key switching, and a throwaway encrypted table.

SEEDERS holds, per encrypted column of the real metadata, a function that stores a given
secret in that column for a tenant. `seed_every_encrypted_column` fails for a column it
has no seeder for, so a new encrypted column cannot escape the canary sweep and the
rotation test: add its seeder here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from cryptography.fernet import Fernet
from flask import Flask
from sqlalchemy import Column, Integer, MetaData, String, Table, Text, select, type_coerce

from app.extensions import db
from app.models.types import EncryptedJSON, EncryptedText
from app.services.key_rotation import encrypted_columns


def _sandbox_config(tenant, secret: str) -> None:
    from tests.sweeps.routes import make_sandbox_config

    make_sandbox_config(tenant, secret)


def _session_traffic_token(tenant, secret: str) -> None:
    """A session bound to a (fictitious) Cube sandbox whose traffic token is `secret`."""
    from app.models import BindingState, SandboxSession
    from app.services.sessions import lifecycle
    from tests import factories
    from tests.sweeps.routes import make_sandbox_config

    members = sorted(tenant.memberships, key=lambda m: m.id)
    owner = members[0].user if members else factories.make_user(
        f"canary-{uuid.uuid4().hex[:8]}@sweep.test", tenant, "owner")
    from app.models import SandboxConfig

    config_id = db.session.scalar(select(SandboxConfig.id).where(
        SandboxConfig.tenant_id == tenant.id)) or make_sandbox_config(tenant)
    session = lifecycle.create_session(tenant, owner, config_id, "canary")
    row = db.session.get(SandboxSession, session.id)
    row.binding_state, row.sandbox_id, row.provider = BindingState.bound, "cube-canary", "cube"
    row.traffic_token = secret
    db.session.commit()


def _installed_skill_env(tenant, secret: str) -> None:
    """An installed skill whose admin value for its declared variable is `secret`."""
    from tests.sweeps.routes import make_installed_skill

    make_installed_skill(tenant, secret=secret)


def _personal_env_value(tenant, secret: str) -> None:
    """A member's own config-wide value `secret` on the tenant's newest config."""
    from app.models import PersonalEnvVar, SandboxConfig
    from app.models.personal_env import CONFIG_WIDE, PRINCIPAL_USER
    from tests import factories
    from tests.sweeps.routes import make_sandbox_config

    members = sorted(tenant.memberships, key=lambda m: m.id)
    user = members[0].user if members else factories.make_user(
        f"canary-{uuid.uuid4().hex[:8]}@sweep.test", tenant, "owner")
    config_id = db.session.scalar(select(SandboxConfig.id).where(
        SandboxConfig.tenant_id == tenant.id)) or make_sandbox_config(tenant)
    db.session.add(PersonalEnvVar(
        id=str(uuid.uuid4()), tenant_id=tenant.id, principal_type=PRINCIPAL_USER,
        principal_id=str(user.id), sandbox_config_id=config_id, skill_id=CONFIG_WIDE,
        name=f"CANARY_{uuid.uuid4().hex[:6].upper()}", value=secret))
    db.session.commit()


def _removal_traffic_token(tenant, secret: str) -> None:
    """An ended session's Cube sandbox still to remove, whose traffic token is `secret`
    (not due, so no sweeper reaches for a provider during the sweep)."""
    from datetime import timedelta

    from app.models import SandboxConfig, SandboxRemoval
    from app.models.types import utcnow
    from tests.sweeps.routes import make_sandbox_config

    config_id = db.session.scalar(select(SandboxConfig.id).where(
        SandboxConfig.tenant_id == tenant.id)) or make_sandbox_config(tenant)
    db.session.add(SandboxRemoval(tenant_id=tenant.id, sandbox_config_id=config_id,
                                  session_id=str(uuid.uuid4()), sandbox_id="cube-ended",
                                  traffic_token=secret,
                                  next_attempt_at=utcnow() + timedelta(days=1)))
    db.session.commit()


# "table.column" -> store `secret` in that column for `tenant` (one row).
SEEDERS: dict[str, Callable[[Any, str], None]] = {
    "sandbox_configs.config": _sandbox_config,
    "sandbox_sessions.traffic_token": _session_traffic_token,
    "sandbox_removals.traffic_token": _removal_traffic_token,
    "installed_skills.env_values": _installed_skill_env,
    "personal_env_vars.value": _personal_env_value,
}


def real_encrypted_columns() -> list[str]:
    return sorted(f"{table.name}.{name}" for table, name in encrypted_columns())


def seed_every_encrypted_column(tenant, secret: str) -> list[str]:
    """One row per encrypted column holding `secret`; returns the columns seeded."""
    missing = [c for c in real_encrypted_columns() if c not in SEEDERS]
    assert not missing, (
        f"encrypted column(s) {missing} have no canary seeder; add one to SEEDERS in "
        "tests/sweeps/secrets.py so the secret sweep and key rotation cover them")
    for column in real_encrypted_columns():
        SEEDERS[column](tenant, secret)
    return real_encrypted_columns()


def raw_tokens(table: Table, column: str) -> list[str]:
    """What the database holds for `column`: the ciphertext, not the decrypted value."""
    query = select(type_coerce(table.c[column], Text)).where(table.c[column].is_not(None))
    return [value for (value,) in db.session.execute(query)]


@contextmanager
def using_keys(app: Flask, keys: list[str]) -> Iterator[None]:
    """Run with SECRETS_KEYS = `keys` (newest first), then put the test keys back."""
    saved = app.config["SECRETS_KEYS"]
    app.config["SECRETS_KEYS"] = keys
    app.extensions.pop("sandlot_crypto", None)
    try:
        yield
    finally:
        app.config["SECRETS_KEYS"] = saved
        app.extensions.pop("sandlot_crypto", None)


def new_key() -> str:
    return Fernet.generate_key().decode()


@contextmanager
def vault() -> Iterator[Table]:
    """A throwaway table with encrypted columns on its own MetaData (never the app's)."""
    metadata = MetaData()
    table = Table(f"zz_vault_{uuid.uuid4().hex[:8]}", metadata,
                  Column("id", Integer, primary_key=True), Column("label", String(40)),
                  Column("secret", EncryptedText), Column("doc", EncryptedJSON))
    metadata.create_all(db.engine)
    try:
        yield table
    finally:
        db.session.rollback()
        metadata.drop_all(db.engine)
