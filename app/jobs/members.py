"""Jobs for membership changes."""

from __future__ import annotations

from typing import Any

from app.jobs.registry import job_kind
from app.services.identity import member_exit


@job_kind(member_exit.JOB_KIND)
def end_member_sessions(ctx, *, user_id: int, **_: Any) -> dict[str, Any]:
    """End a removed member's sessions in the job's tenant (safe to re-run)."""
    ctx.progress(5, "ending sessions")
    return member_exit.end_sessions(ctx.tenant_id, int(user_id), ctx.log)
