"""Sessions: one member's conversation with one persistent sandbox (reference 1.4, 9.1-9.2)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Enum, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import EncryptedText, UTCDateTime, utcnow


class BindingState(enum.StrEnum):
    none = "none"  # no sandbox yet (or it was lost and not yet replaced)
    creating = "creating"  # one request holds the right to create it
    bound = "bound"
    # Its sandbox is missing on the engine that held it (decisions 17): reported, never
    # silently replaced; the member starts a new one (POST /sessions/:id/sandbox).
    gone = "gone"


class SandboxSession(db.Model):
    __tablename__ = "sandbox_sessions"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    sandbox_config_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_configs.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(String(200), default="")
    # The binding to the provider's sandbox.
    binding_state: Mapped[BindingState] = mapped_column(
        Enum(BindingState, name="binding_state", native_enum=False, length=16,
             validate_strings=True), default=BindingState.none)
    binding_version: Mapped[int] = mapped_column(default=0)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    sandbox_id: Mapped[str | None] = mapped_column(String(128))
    provider: Mapped[str | None] = mapped_column(String(16))
    # Docker: the engine holding the sandbox, by the operator's name (decisions 11) and by
    # the engine's own id, so a host whose engine of that name is another never touches
    # or replaces it (decisions 17). None on E2B and Cube.
    engine: Mapped[str | None] = mapped_column(String(64))
    engine_uid: Mapped[str | None] = mapped_column(String(128))
    sandbox_created_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    skill_generation: Mapped[int] = mapped_column(default=0)
    stale: Mapped[bool] = mapped_column(default=False)
    policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # as resolved at creation
    # Cube hands out a per-sandbox traffic token once, at creation; replayed on reconnect.
    traffic_token: Mapped[str | None] = mapped_column(EncryptedText)
    exec_count: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
