"""The `sandbox_check` job: run a sandbox check from its row's params (reference 5)."""

from __future__ import annotations

from typing import Any

from app.errors import AppError, ValidationFailed
from app.jobs.registry import JobFailed, job_kind
from app.services.sandboxes.check import job as sandbox_check


@job_kind(sandbox_check.JOB_KIND)
def run_sandbox_check(ctx, **params: Any) -> dict[str, Any]:
    """Progress and a log line per check; the result is the reference 5.2 response."""

    def report(row: sandbox_check.Check, done: int, total: int) -> None:
        ctx.progress(min(95, done * 100 // max(total, 1)), f"{row.name}: {row.status}")
        ctx.log(row.line())

    ctx.progress(2, "starting")
    try:
        return sandbox_check.run_job(ctx.tenant_id, ctx.job_id, params, report)
    except AppError as exc:  # the config went away or no longer validates
        problems = "; ".join(f"{e['field']}: {e['message']}" for e in exc.errors) if isinstance(
            exc, ValidationFailed) else ""
        raise JobFailed(f"{exc.message} {problems}".strip()) from None
