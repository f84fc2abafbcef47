"""The egress log: one row per connection Docker's egress gateway decided (or name the
sandbox resolver refused), ingested from the host's log files (issue 24 item 2)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import UTCDateTime, utcnow


class EgressEvent(db.Model):
    __tablename__ = "egress_events"
    __table_args__ = (
        Index("ix_egress_events_tenant_at", "tenant_id", "at", "id"),
        Index("ix_egress_events_session_at", "session_id", "at"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    sandbox_config_id: Mapped[str | None] = mapped_column(String(36))
    # A session's sandbox: its session and member; installs and checks have neither.
    session_id: Mapped[str | None] = mapped_column(String(36))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    purpose: Mapped[str] = mapped_column(String(16), default="session")
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    protocol: Mapped[str] = mapped_column(String(8))  # tls, http, tcp, dns
    host: Mapped[str | None] = mapped_column(String(253))  # the name presented, if any
    address: Mapped[str | None] = mapped_column(String(45))
    port: Mapped[int] = mapped_column(default=0)
    verdict: Mapped[str] = mapped_column(String(8))  # allowed, denied, failed
    rule: Mapped[str] = mapped_column(String(300), default="")
    sent: Mapped[int] = mapped_column(BigInteger, default=0)
    received: Mapped[int] = mapped_column(BigInteger, default=0)
    duration_ms: Mapped[int] = mapped_column(default=0)


class EgressAccessRequest(db.Model):
    """A member's request that a sandbox config allow a host its policy refused (issue 24
    item 5): pending until an admin allows it (a policy edit) or declines it."""

    __tablename__ = "egress_access_requests"
    __table_args__ = (Index("ix_egress_access_requests_tenant_status", "tenant_id", "status"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    sandbox_config_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_configs.id", ondelete="CASCADE"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    session_id: Mapped[str | None] = mapped_column(String(36))
    host: Mapped[str] = mapped_column(String(253))
    reason: Mapped[str] = mapped_column(String(500), default="")
    status: Mapped[str] = mapped_column(String(12), default="pending")  # approved, declined
    decided_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
