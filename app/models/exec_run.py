"""Exec runs: one command run in a session's sandbox (issue 11 item 1, decisions 12).

A run outlives the request that started it: it executes on a bounded pool off the
request thread, and its status, exit code and output (head and tail, capped at
RUN_OUTPUT_CAP per stream) are written here while it runs, so history, polling and the
event stream read rows, never the sandbox; one that outlives its request names the process
executing it and carries its heartbeat (a run whose process died becomes `lost`). The
command is stored as the member typed it; the resolved environment is never stored, and
its values are masked in stored output.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import JSON, Enum, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import PrintedText, UTCDateTime, utcnow


class RunStatus(enum.StrEnum):
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    timed_out = "timed_out"
    cancelled = "cancelled"
    lost = "lost"  # the process running it died: its result is unknown


class ExecRun(db.Model):
    __tablename__ = "exec_runs"
    __table_args__ = (Index("ix_exec_runs_session_created", "session_id", "created_at"),
                      Index("ix_exec_runs_status_heartbeat", "status", "heartbeat_at"))

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_sessions.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    command: Mapped[str] = mapped_column(Text)
    skill: Mapped[str | None] = mapped_column(String(100))
    timeout_sec: Mapped[int] = mapped_column(default=60)
    status: Mapped[RunStatus] = mapped_column(
        Enum(RunStatus, name="run_status", native_enum=False, length=16,
             validate_strings=True), default=RunStatus.running)
    exit_code: Mapped[int | None] = mapped_column()
    duration_ms: Mapped[int | None] = mapped_column()
    # Head and tail of each stream (see app.services.sessions.run_output); *_bytes counts all of it.
    stdout: Mapped[str] = mapped_column(PrintedText, default="")
    stderr: Mapped[str] = mapped_column(PrintedText, default="")
    stdout_bytes: Mapped[int] = mapped_column(default=0)
    stderr_bytes: Mapped[int] = mapped_column(default=0)
    truncated: Mapped[bool] = mapped_column(default=False)
    # What Docker's egress gateway refused during the run: [{host, port, count}].
    egress_denied: Mapped[list | None] = mapped_column(JSON)
    # How many files the command created or changed in /workspace/output (None: unknown).
    new_output_files: Mapped[int | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(String(300))
    # The provider's handle of the running command (Docker: exec id and start ticks).
    exec_ref: Mapped[str | None] = mapped_column(String(200))
    sandbox_id: Mapped[str | None] = mapped_column(String(128))
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    # A run that outlives its request: the process executing it ("host:pid:start token")
    # and when that process last said it still does (every RUN_HEARTBEAT_SECONDS).
    owner: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
