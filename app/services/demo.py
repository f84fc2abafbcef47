"""The demo workspace that `flask demo seed` and `make run` create."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import select

from app.extensions import db
from app.models import Role, SandboxConfig
from app.services import audit
from app.services.identity import users
from app.services.sandboxes import configs

DEMO_TENANT = "Demo"
DEMO_CONFIG = "Local Docker"
# The image `make run` builds locally (scripts/sandbox-image.sh), on the local engine.
DEMO_DOCKER = {"sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:base"}}
DEMO_ACCOUNTS = (
    ("admin@demo.sandlot.local", Role.owner),
    ("member@demo.sandlot.local", Role.contributor),
)


@dataclass(frozen=True)
class DemoAccount:
    email: str
    role: str
    password: str


@dataclass(frozen=True)
class DemoResult:
    tenant_name: str
    accounts: list[DemoAccount]
    sandbox_config: str


def seed_demo() -> DemoResult:
    """Create the demo workspace and accounts; each run sets fresh random passwords."""
    tenant = users.find_tenant(DEMO_TENANT) or users.create_tenant(DEMO_TENANT)
    actor = audit.SystemActor("demo seed")
    accounts = []
    for email, role in DEMO_ACCOUNTS:
        password = secrets.token_urlsafe(9)
        user = users.find_user(email)
        if user is None:
            user = users.create_user(email, password)
        else:
            users.set_password(user, password)
        if not any(m.tenant_id == tenant.id for m in user.memberships):
            users.grant(tenant, user, role)
            audit.record(tenant, actor, "member.added", "user", user.id,
                         {"email": email, "role": role.value})
        accounts.append(DemoAccount(email, role.value, password))
    db.session.commit()
    _ensure_docker_config(tenant, actor)
    return DemoResult(tenant.name, accounts, DEMO_CONFIG)


def _ensure_docker_config(tenant, actor) -> None:
    exists = db.session.scalar(select(SandboxConfig.id).where(
        SandboxConfig.tenant_id == tenant.id, SandboxConfig.name == DEMO_CONFIG,
        SandboxConfig.deleted_at.is_(None)))
    if exists is None:
        configs.create_config(tenant, actor, DEMO_CONFIG,
                                      "The local Docker engine with the base sandbox image.",
                                      DEMO_DOCKER)
