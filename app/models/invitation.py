"""Invitations to a workspace: a single-use link whose token is stored only as a digest."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import Enum, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.extensions import db
from app.models.tenant import Role, Tenant
from app.models.types import UTCDateTime, utcnow
from app.models.user import User


class InvitationStatus(enum.StrEnum):
    pending = "pending"
    accepted = "accepted"
    revoked = "revoked"
    expired = "expired"  # shown for a pending row past its expiry; never stored by us


class Invitation(db.Model):
    __tablename__ = "invitations"

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    email: Mapped[str] = mapped_column(String(254), index=True)  # normalised
    role: Mapped[Role] = mapped_column(
        Enum(Role, name="role", native_enum=False, length=20, validate_strings=True))
    token_digest: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex
    status: Mapped[InvitationStatus] = mapped_column(
        Enum(InvitationStatus, name="invitation_status", native_enum=False, length=16,
             validate_strings=True), default=InvitationStatus.pending)
    invited_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    accepted_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"))
    accepted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    tenant: Mapped[Tenant] = relationship()
    invited_by: Mapped[User | None] = relationship(foreign_keys=[invited_by_id])

    def state(self, now: datetime) -> InvitationStatus:
        """The status as people see it: a pending invitation past its expiry is expired."""
        if self.status == InvitationStatus.pending and self.expires_at <= now:
            return InvitationStatus.expired
        return InvitationStatus(self.status)
