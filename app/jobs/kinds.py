"""The job kinds this build knows. Each takes ids and params and is safe to re-run."""

from __future__ import annotations

from typing import Any

from app.jobs import (  # noqa: F401  (registers their kinds)
    members,
    sandbox_check,
    sessions,
    skills,
    templates,
)
from app.jobs.registry import job_kind
from app.services import audit

EXPORT_ROW_LIMIT = 100_000


@job_kind("audit_export")
def audit_export(ctx, **_: Any) -> dict[str, Any]:
    """Export the tenant's audit trail as CSV into the job's result."""
    total = audit.count(ctx.tenant_id)
    ctx.progress(5, f"exporting {total} events")
    csv_text, rows = audit.to_csv(_limited(audit.iter_events(ctx.tenant_id), EXPORT_ROW_LIMIT))
    ctx.log(f"wrote {rows} of {total} audit events")
    ctx.progress(95, "saving")
    return {"rows": rows, "total": total, "truncated": rows < total, "csv": csv_text}


def _limited(items, limit: int):
    for index, item in enumerate(items):
        if index >= limit:
            return
        yield item
