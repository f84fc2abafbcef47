"""Web terminals of sessions (issue 26): one-time tickets, and what holds shared
capacity now (open terminals, file transfers).

A ticket is what a WebSocket presents instead of a cookie or a bearer token: random,
stored as its sha256, bound to its session and member (and, from a browser, to the
sign-in that asked for it), valid 120 s and used at most once. A capacity hold is a row
for as long as its use lasts (a terminal refreshes its row every few seconds), so that
every process counts the same uses; a row its process stopped refreshing (a crash) stops
counting (services/capacity.py).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import UTCDateTime, utcnow


class TerminalTicket(db.Model):
    __tablename__ = "terminal_tickets"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_sessions.id", ondelete="CASCADE"), index=True)
    # The browser sign-in's digest (login_sessions), None for a bearer token's ticket.
    login_digest: Mapped[str | None] = mapped_column(String(64))
    session_version: Mapped[int] = mapped_column()
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class CapacityHold(db.Model):
    __tablename__ = "capacity_holds"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(24))  # "terminal", "file_transfer"
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"),
                                           index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_sessions.id", ondelete="CASCADE"), index=True)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
