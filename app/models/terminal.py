"""Web terminals of sessions (issue 26): one-time tickets, and the terminals open now.

A ticket is what a WebSocket presents instead of a cookie or a bearer token: random,
stored as its sha256, bound to its session and member (and, from a browser, to the
sign-in that asked for it), valid 120 s and used at most once. An open terminal is a row
for as long as its relay runs, refreshed every few seconds, so that every process counts
the same terminals; a row its process stopped refreshing (a crash) stops counting.
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


class OpenTerminal(db.Model):
    __tablename__ = "open_terminals"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"),
                                           index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_sessions.id", ondelete="CASCADE"), index=True)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
