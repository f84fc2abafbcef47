"""Sandboxes still to remove after their session was ended (issue 11 item 6).

Ending a session closes its record at once; what the provider still holds is written here
in the same transaction, so a provider that is down, slow or refusing leaves a row the
sweeper retries (app.services.sessions.ending.sweep) instead of an orphan nobody knows of.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import EncryptedText, UTCDateTime, utcnow


class SandboxRemoval(db.Model):
    __tablename__ = "sandbox_removals"

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    # Configs are soft-deleted, so the credentials to reach the provider stay readable.
    sandbox_config_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_configs.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[str] = mapped_column(String(36))  # the ended session (row gone)
    sandbox_id: Mapped[str | None] = mapped_column(String(128))
    traffic_token: Mapped[str | None] = mapped_column(EncryptedText)  # Cube needs it to delete
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    last_error: Mapped[str | None] = mapped_column(String(300))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
