"""Who is calling: a user (browser or bearer) or an API key, inside one tenant."""

from __future__ import annotations

from dataclasses import dataclass

from app.models import ApiKey, Role, Tenant, User


@dataclass
class Principal:
    tenant: Tenant
    user: User | None = None
    role: Role | None = None
    api_key: ApiKey | None = None

    @property
    def tenant_id(self) -> int:
        return self.tenant.id

    @property
    def actor_label(self) -> str:
        if self.api_key is not None:
            return f"api-key:{self.api_key.prefix}"
        return self.user.email if self.user else "system"

    @property
    def actor_id(self) -> int | None:
        if self.user is not None:
            return self.user.id
        return self.api_key.created_by_id if self.api_key else None
