"""Jobs for ended sessions."""

from __future__ import annotations

from typing import Any

from app.jobs.registry import job_kind
from app.services.sessions import ending


@job_kind(ending.JOB_KIND)
def remove_sandboxes(ctx, *, removal_id: int, **_: Any) -> dict[str, Any]:
    """Remove an ended session's sandbox at its provider (safe to re-run). A provider that
    cannot be reached leaves the removal to the sweeper, which is not a job failure: the
    session is already closed."""
    ctx.progress(5, "removing the sandbox")
    outcome = ending.remove(int(removal_id))
    if outcome == "retry":
        ctx.log("the sandbox provider could not be reached; the sandbox will be removed by "
                "the sweeper once it answers")
    return {"outcome": outcome}
