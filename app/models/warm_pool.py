"""Warm pools (issue 29 item 2): started Docker sandboxes of a config, ready for the next
new session to claim instead of waiting for a create.

A pool sandbox's labels say `sandlot_purpose=pool` and name its row (`sandlot_pool_id`):
Docker labels cannot change, so which session claimed it is written here, in the row,
and kept until that session ends (the egress log and the inventory read it).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Enum, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import UTCDateTime, utcnow


class PoolState(enum.StrEnum):
    warming = "warming"  # a keeper is creating it (the row reserves its place first)
    ready = "ready"  # started, waiting for a session
    claimed = "claimed"  # a session took it; the row stays until that session ends
    draining = "draining"  # no longer wanted (config changed, pool off, too old): removing


class WarmPool(db.Model):
    """A config's pool: when its sessions were last seen (a pool is off after an hour
    without any) and why its last refill failed, for the dashboard."""

    __tablename__ = "warm_pools"

    config_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_configs.id", ondelete="CASCADE"), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    last_session_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    problem: Mapped[str] = mapped_column(String(300), default="")
    problem_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    failures: Mapped[int] = mapped_column(default=0)  # refills failed in a row
    retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class PoolSandbox(db.Model):
    __tablename__ = "pool_sandboxes"
    __table_args__ = (Index("ix_pool_sandboxes_config_state", "config_id", "state"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    config_id: Mapped[str] = mapped_column(ForeignKey("sandbox_configs.id", ondelete="CASCADE"))
    engine: Mapped[str] = mapped_column(String(64))  # the operator's name for it
    engine_uid: Mapped[str | None] = mapped_column(String(128))
    # What the sandbox was created as (template, limits, env, policy): a session claims
    # only one made as its config would make one now.
    fingerprint: Mapped[str] = mapped_column(String(64))
    state: Mapped[PoolState] = mapped_column(
        Enum(PoolState, name="pool_state", native_enum=False, length=16,
             validate_strings=True), default=PoolState.warming)
    sandbox_id: Mapped[str | None] = mapped_column(String(128))
    policy: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    session_id: Mapped[str | None] = mapped_column(String(36), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ready_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
