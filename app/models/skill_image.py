"""What skill installs leave behind: the snapshot ledger (reference 1.8), the durable
install events (progress and transcript, decisions 8) and the per-config image lease."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import BigInteger, Enum, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import PrintedText, UTCDateTime, utcnow


class SnapshotState(enum.StrEnum):
    building = "building"
    active = "active"
    superseded = "superseded"
    deleted = "deleted"


class SnapshotTrigger(enum.StrEnum):
    install = "install"
    remove = "remove"
    rebuild = "rebuild"


class SkillSnapshot(db.Model):
    """One provider snapshot a skill run built. `planned_name` is chosen before the
    provider call, so an abandoned build can be found and released by name."""

    __tablename__ = "skill_snapshots"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    # No foreign keys to the config or skill: a ledger row must outlive both until the
    # provider snapshot it names is released.
    sandbox_config_id: Mapped[str] = mapped_column(String(36), index=True)
    skill_id: Mapped[str | None] = mapped_column(String(36))
    provider: Mapped[str] = mapped_column(String(16))
    snapshot_id: Mapped[str | None] = mapped_column(String(255))
    parent_snapshot_id: Mapped[str | None] = mapped_column(String(255))
    generation: Mapped[int] = mapped_column(Integer)
    planned_name: Mapped[str] = mapped_column(String(128))
    trigger: Mapped[SnapshotTrigger] = mapped_column(
        Enum(SnapshotTrigger, name="snapshot_trigger", native_enum=False, length=16,
             validate_strings=True))
    state: Mapped[SnapshotState] = mapped_column(
        Enum(SnapshotState, name="snapshot_state", native_enum=False, length=16,
             validate_strings=True), default=SnapshotState.building, index=True)
    error: Mapped[str | None] = mapped_column(Text)
    # What this snapshot added to its parent image (Docker), counted against the
    # workspace's quota of skill image bytes; None where the provider cannot say.
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    superseded_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class EventKind(enum.StrEnum):
    progress = "progress"  # a stage change (reference 7.3)
    command = "command"  # a command the installer ran
    output = "output"  # what it printed, and its exit code
    note = "note"  # a non-fatal verification note, or a step's information
    error = "error"  # why the run failed


class SkillInstallEvent(db.Model):
    """One durable progress or transcript entry of one install/removal run."""

    __tablename__ = "skill_install_events"
    __table_args__ = (Index("ix_skill_install_events_run_seq", "run_id", "seq", unique=True),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    skill_id: Mapped[str] = mapped_column(String(36), index=True)
    run_id: Mapped[str] = mapped_column(String(36))
    seq: Mapped[int] = mapped_column(Integer)
    stage: Mapped[str] = mapped_column(String(32))
    percent: Mapped[int] = mapped_column(Integer)
    kind: Mapped[EventKind] = mapped_column(
        Enum(EventKind, name="install_event_kind", native_enum=False, length=16,
             validate_strings=True))
    status: Mapped[str | None] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(PrintedText, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SkillImageLease(db.Model):
    """The per-config image lock without Redis: one holder until `expires_at`."""

    __tablename__ = "skill_image_leases"

    sandbox_config_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
