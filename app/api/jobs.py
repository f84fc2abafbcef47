"""Job status, and the audit export job."""

from __future__ import annotations

from app.api import bp
from app.api._core import Out, doc, ok, project
from app.api.schemas import JobOut
from app.auth.guards import ANY_KEY, FULL_ACCESS, guard
from app.errors import NotFound
from app.models import Job, Role
from app.services import jobs
from app.tenancy import get_or_404, principal


class JobAccepted(Out):
    job: JobOut


@bp.get("/jobs/<uuid:job_id>")
@guard(Role.admin, api_key=ANY_KEY)
@doc("A job's status, progress, log and result (an API key without full access reads only "
     "the jobs it started)", response=JobOut, errors=(404,))
def get_job(job_id):
    job, key = get_or_404(Job, str(job_id), "job"), principal().api_key
    if key is not None and not key.full_access and job.api_key_id != key.id:
        raise NotFound("No such job in this workspace.")  # as a foreign id: not there for the key
    return ok(project(JobOut, job))


@bp.post("/audit/export")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Start exporting the audit trail as CSV", response=JobAccepted, status=202, errors=(503,))
def export_audit():
    who = principal()
    job = jobs.enqueue("audit_export", tenant_id=who.tenant_id, actor_id=who.actor_id,
                       target_type="tenant", target_id=who.tenant_id)
    return ok({"job": project(JobOut, job)}, 202)
