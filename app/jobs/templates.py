"""The `provision_templates` job: build E2B/Cube templates off the request thread
(reference 3.1.7); progress and a log line per step, the 3.1.7 response as its result."""

from __future__ import annotations

from typing import Any

from app.errors import AppError, ValidationFailed
from app.jobs.registry import JobFailed, job_kind
from app.services.sandboxes import templates as sandbox_templates


@job_kind(sandbox_templates.JOB_KIND)
def provision_templates(ctx, **params: Any) -> dict[str, Any]:
    def report(percent: int, line: str) -> None:
        if percent >= 0:
            ctx.progress(min(99, percent), line)
        ctx.log(line)

    ctx.progress(1, "starting")
    try:
        return sandbox_templates.run_job(ctx.tenant_id, params, report)
    except sandbox_templates.BuildFailed as exc:
        raise JobFailed(str(exc)) from None
    except AppError as exc:  # the config went away, no longer validates, or is unreachable
        problems = "; ".join(f"{e['field']}: {e['message']}" for e in exc.errors) if isinstance(
            exc, ValidationFailed) else ""
        raise JobFailed(f"{exc.message} {problems}".strip()) from None
