"""The demo workspace that `flask demo seed` and `make run` create."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from app.extensions import db
from app.models import Role
from app.services import audit, users

DEMO_TENANT = "Demo"
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
    return DemoResult(tenant.name, accounts)
