"""Tenants (workspaces) and memberships with ordered roles."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import JSON, Boolean, Enum, ForeignKey, String, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.extensions import db
from app.models.types import UTCDateTime, utcnow

if TYPE_CHECKING:
    from app.models.user import User


class Role(enum.StrEnum):
    viewer = "viewer"
    contributor = "contributor"
    admin = "admin"
    owner = "owner"

    @property
    def rank(self) -> int:
        return ROLE_ORDER.index(self)

    def at_least(self, other: Role) -> bool:
        return self.rank >= other.rank


ROLE_ORDER = [Role.viewer, Role.contributor, Role.admin, Role.owner]


class Tenant(db.Model):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    scripts_disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    # The egress log keeps nothing of this workspace's sandboxes while set (issue 24).
    egress_log_disabled: Mapped[bool] = mapped_column(Boolean, default=False,
                                                      server_default=false())
    # The operator's quota overrides for this workspace ({quota name: limit}; services.quotas).
    quotas: Mapped[dict[str, int] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    memberships: Mapped[list[Membership]] = relationship(back_populates="tenant")


class Membership(db.Model):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("tenant_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[Role] = mapped_column(
        Enum(Role, name="role", native_enum=False, length=20, validate_strings=True)
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    tenant: Mapped[Tenant] = relationship(back_populates="memberships")
    user: Mapped[User] = relationship(back_populates="memberships")
