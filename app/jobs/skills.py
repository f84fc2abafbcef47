"""The skill image jobs: `install_skill` and `uninstall_skill` (reference 7.2, 7.6)."""

from __future__ import annotations

from typing import Any

from app.jobs.registry import JobFailed, job_kind
from app.services.skills.installs import pipeline, removal

INSTALL, UNINSTALL = "install_skill", "uninstall_skill"


def _outcome(result: dict[str, Any]) -> dict[str, Any]:
    if result.get("status") in ("failed", "stopped"):
        raise JobFailed(result.get("error") or "the run failed")
    return result


@job_kind(INSTALL)
def install_skill(ctx, skill_id: str, notes: str | None = None, **_: Any) -> dict[str, Any]:
    """Build the skill into its config's image; the row and its events say how it went."""
    return _outcome(pipeline.install(ctx.job_id, skill_id, on_progress=_progress(ctx),
                                     notes=notes))


@job_kind(UNINSTALL)
def uninstall_skill(ctx, skill_id: str, **_: Any) -> dict[str, Any]:
    """Take the skill out of its config's image (or clear the image after the last one)."""
    return _outcome(removal.uninstall(ctx.job_id, skill_id, on_progress=_progress(ctx)))


def _progress(ctx):
    return lambda percent, stage: ctx.progress(percent, stage)
