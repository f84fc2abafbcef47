"""Job progress fragments that poll until terminal, and the audit log export they serve."""

from __future__ import annotations

from flask import Response, redirect, render_template, url_for

from app.auth.guards import guard
from app.errors import NotFound
from app.extensions import htmx
from app.models import Job, JobStatus, Role
from app.security import csv_safe
from app.services import jobs as job_service
from app.tenancy import current_tenant, get_or_404, principal
from app.web import bp

AUDIT_EXPORT = "audit_export"
STOP_POLLING = 286  # htmx cancels an `every` trigger when a response has this status
KIND_LABELS = {AUDIT_EXPORT: "Audit log export"}


@bp.post("/audit/export")
@guard(Role.admin)
def export_audit():
    who = principal()
    job = job_service.enqueue(AUDIT_EXPORT, tenant_id=who.tenant_id, actor_id=who.actor_id,
                              target_type="tenant", target_id=who.tenant_id)
    if not htmx:
        return redirect(url_for("web.job", job_id=job.id))
    return _render(job, 202)


@bp.get("/jobs/<uuid:job_id>")
@guard(Role.admin)
def job(job_id):
    job = get_or_404(Job, str(job_id), "job")
    return _render(job, STOP_POLLING if job.is_terminal else 200)


@bp.get("/jobs/<uuid:job_id>/export.csv")
@guard(Role.admin)
def job_export_csv(job_id):
    job = get_or_404(Job, str(job_id), "job")
    result = job.result or {}
    if job.kind != AUDIT_EXPORT or job.status != JobStatus.succeeded or "csv" not in result:
        raise NotFound("This job has no finished audit export.")
    stamp = (job.finished_at or job.created_at).strftime("%Y%m%d-%H%M")
    filename = f"sandlot-audit-{current_tenant().id}-{stamp}.csv"
    # Exports stored before cells were neutralised are made safe on the way out too.
    return Response(csv_safe.rewrite(result["csv"]), mimetype="text/csv", headers={
        "Content-Disposition": f'attachment; filename="{filename}"',
        "Cache-Control": "no-store",
    })


def _render(job: Job, status: int):
    """The fragment polls itself while the job runs; a terminal one answers 286 to stop."""
    page = "jobs/_job.html" if htmx else "jobs/detail.html"
    return render_template(page, job=job, label=KIND_LABELS.get(job.kind, job.kind)), status
