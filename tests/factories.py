"""Model factories for tests: real rows through the real services, and the documents
they are made from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.extensions import db
from app.models import ApiKey, Invitation, Membership, Role, Tenant, User
from app.services import audit
from app.services.identity import api_keys, invitations, users

PASSWORD = "correct-horse-battery"
PEPPER = "testing-secret-key-not-for-production"  # TestingConfig.SECRET_KEY

CLOSED_PORT = "http://127.0.0.1:9"  # loopback "discard": nothing listens, nothing leaves
# The connection block of each backend, just enough to be valid. Remote backends point at
# a closed loopback port, so they need allow_private_endpoints (set by config_doc).
CONFIG_BLOCKS: dict[str, dict[str, Any]] = {
    "docker": {"image": "sandlot/sandbox:base"},
    "e2b": {"api_key": "e2b_test_key", "template_id": "base", "api_url": CLOSED_PORT},
    "cube": {"api_url": CLOSED_PORT, "proxy_url": CLOSED_PORT, "sandbox_domain": "cube.test",
             "template_id": "base"},
}


def config_doc(kind: str, block: dict[str, Any] | None = None, **overrides: Any
               ) -> dict[str, Any]:
    """A valid config document for `kind` (docker, e2b or cube): the backend's block from
    CONFIG_BLOCKS updated with `block`, then top-level `overrides` (env_vars, network,
    allow_private_endpoints, ...) replacing what they name."""
    doc: dict[str, Any] = {"sandbox_type": kind}
    if kind != "docker":
        doc["allow_private_endpoints"] = True
    doc[kind] = {**CONFIG_BLOCKS[kind], **(block or {})}
    doc.update(overrides)
    return doc


def make_tenant(name: str) -> Tenant:
    tenant = users.create_tenant(name)
    db.session.commit()
    return tenant


def make_user(email: str, tenant: Tenant | None = None, role: Role | str = Role.viewer,
              password: str = PASSWORD) -> User:
    user = users.find_user(email) or users.create_user(email, password)
    if tenant is not None:
        users.grant(tenant, user, Role(role))
    db.session.commit()
    return user


def make_key(tenant: Tenant, *, full_access: bool = True, capabilities: tuple[str, ...] = (),
             name: str = "test key") -> tuple[ApiKey, str]:
    return api_keys.create_key(
        tenant, audit.SystemActor("tests"), name=name, full_access=full_access,
        capabilities=list(capabilities), expires_at=None, pepper=PEPPER,
    )


def make_invitation(tenant: Tenant, email: str, role: Role | str = Role.viewer
                    ) -> tuple[Invitation, str]:
    """A pending invitation through the real service; returns the row and its token."""
    return invitations.create_invitation(tenant, audit.SystemActor("tests"), Role.owner,
                                         email, Role(role))


@dataclass
class TenantUsers:
    tenant: Tenant
    by_role: dict[Role, User] = field(default_factory=dict)

    @property
    def owner(self) -> User:
        return self.by_role[Role.owner]

    @property
    def admin(self) -> User:
        return self.by_role[Role.admin]

    @property
    def contributor(self) -> User:
        return self.by_role[Role.contributor]

    @property
    def viewer(self) -> User:
        return self.by_role[Role.viewer]

    def membership(self, user: User) -> Membership:
        return next(m for m in user.memberships if m.tenant_id == self.tenant.id)


def populate(name: str) -> TenantUsers:
    tenant = make_tenant(name)
    group = TenantUsers(tenant)
    slug = name.lower().replace(" ", "-")
    for role in Role:
        group.by_role[role] = make_user(f"{role.value}@{slug}.test", tenant, role)
    return group
