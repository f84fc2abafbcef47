"""Job rows: create, enqueue, report progress, finish, reap.

The row is the truth. `enqueue` commits the row first and only then hands its id to
the dispatcher (RQ or the in-process worker) that create_app installed.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from flask import current_app
from sqlalchemy import func, or_, select, update

from app.errors import Unavailable
from app.extensions import db
from app.models import Job, JobStatus
from app.models.types import utcnow
from app.services import job_limits

log = logging.getLogger("sandlot.jobs")
LOG_LIMIT = 64 * 1024


def enqueue(
    kind: str, *, tenant_id: int, actor_id: int | None, target_type: str | None = None,
    target_id: Any = None, params: dict[str, Any] | None = None, timeout_sec: int | None = None,
    job_id: str | None = None, api_key_id: int | None = None,
) -> Job:
    """Commit the row (with whatever else the session holds), then hand it over. A caller
    that must record the job's id on its own row first passes `job_id` and sets it before
    calling, so the two are committed together and no run can start before it."""
    timeout = timeout_sec or job_limits.limit_for(kind, current_app.config["JOB_DEFAULT_TIMEOUT"])
    job = Job(
        id=job_id or str(uuid.uuid4()), tenant_id=tenant_id, actor_id=actor_id,
        api_key_id=api_key_id, kind=kind,
        target_type=target_type, target_id=None if target_id is None else str(target_id),
        params=params or {}, status=JobStatus.pending, timeout_sec=timeout,
    )
    db.session.add(job)
    db.session.commit()
    try:
        current_app.extensions["sandlot_dispatcher"].submit(job.id, timeout, tenant_id=tenant_id)
    except Exception as exc:  # the queue is down: the row must not stay pending forever
        finish(job.id, JobStatus.errored, error=f"could not enqueue: {type(exc).__name__}")
        raise Unavailable("The job queue is not reachable; try again shortly.") from exc
    return job


def get(tenant_id: int, job_id: str) -> Job | None:
    job = db.session.get(Job, job_id)
    return job if job is not None and job.tenant_id == tenant_id else None


def claim(job_id: str) -> bool:
    """Move a pending row to running; False when another run got it or it already ended."""
    now = utcnow()
    result = db.session.execute(
        update(Job).where(Job.id == job_id, Job.status == JobStatus.pending)
        .values(status=JobStatus.running, started_at=now, heartbeat_at=now)
    )
    db.session.commit()
    return result.rowcount == 1


def heartbeat(job_id: str) -> None:
    db.session.execute(
        update(Job).where(Job.id == job_id, Job.status == JobStatus.running)
        .values(heartbeat_at=utcnow())
    )
    db.session.commit()


def progress(job_id: str, percent: int | None = None, stage: str | None = None,
             log_line: str | None = None) -> None:
    job = db.session.get(Job, job_id)
    if job is None or job.is_terminal:
        return
    if percent is not None:
        job.percent = max(0, min(100, percent))
    if stage is not None:
        job.stage = stage[:100]
    if log_line is not None:
        job.log = ((job.log or "") + log_line.rstrip("\n") + "\n")[-LOG_LIMIT:]
    job.heartbeat_at = utcnow()
    db.session.commit()


def finish(job_id: str, status: JobStatus, *, result: dict[str, Any] | None = None,
           error: str | None = None) -> bool:
    """Record the outcome once; a row that already ended keeps its first outcome."""
    values: dict[str, Any] = {"status": status, "finished_at": utcnow(), "error": error}
    if status == JobStatus.succeeded:
        values.update(percent=100, result=result)
    outcome = db.session.execute(
        update(Job).where(Job.id == job_id, Job.status.in_([JobStatus.pending, JobStatus.running]))
        .values(**values)
    )
    db.session.commit()
    return outcome.rowcount == 1


def reap(heartbeat_grace: int, pending_max: int = 3600) -> int:
    """Mark rows whose worker went silent, ran past their timeout, or never started, and
    have the dispatcher free what it holds for each (on RQ, the tenant's fair-share slot,
    so the tenant's next waiting job is admitted in this same pass)."""
    now = utcnow()
    # A running row that never beat is judged from when it started (or was created).
    last_sign = func.coalesce(Job.heartbeat_at, Job.started_at, Job.created_at)
    silent = last_sign < now - timedelta(seconds=heartbeat_grace)
    stale = select(Job).where(or_(
        (Job.status == JobStatus.running) & silent,
        (Job.status == JobStatus.pending) & (Job.created_at < now - timedelta(seconds=pending_max)),
    ))
    reaped = 0
    for job_id, tenant_id, status in [(job.id, job.tenant_id, job.status)
                                      for job in db.session.scalars(stale)]:
        reason = (f"The worker went silent (no heartbeat for {heartbeat_grace} s)."
                  if status == JobStatus.running else "Job never started.")
        reaped += _reaped(job_id, tenant_id, JobStatus.errored, reason)
    overdue = select(Job).where(Job.status == JobStatus.running, Job.started_at.is_not(None))
    for job in list(db.session.scalars(overdue)):
        # Past timeout + grace the run is over, whatever its heartbeat says: nothing stops
        # an in-process run, and a worker may have lost its death penalty.
        limit = job.started_at + timedelta(seconds=job.timeout_sec + heartbeat_grace)
        if limit < now:
            reaped += _reaped(job.id, job.tenant_id, JobStatus.failed,
                              job_limits.overrun_reason(job.kind, job.timeout_sec))
    return reaped


def _reaped(job_id: str, tenant_id: int, status: JobStatus, error: str) -> bool:
    """End the row; if this call ended it, tell the dispatcher (its `reaped` hook). The row
    is already committed: a dispatcher that cannot answer leaves its own backstop (on RQ
    the slot expires at its score) and must not stop the pass."""
    if not finish(job_id, status, error=error):
        return False
    hook = getattr(current_app.extensions.get("sandlot_dispatcher"), "reaped", None)
    if hook is not None:
        try:
            hook(job_id, tenant_id)
        except Exception:
            log.warning("could not free reaped job %s's dispatcher slot", job_id, exc_info=True)
    return True


def ensure_housekeeping() -> None:
    """Have this process's housekeeping (the reaper, the warm pools' keeper) running now:
    the in-process dispatcher starts it lazily; workers of a queue run their own."""
    hook = getattr(current_app.extensions.get("sandlot_dispatcher"), "ensure_housekeeping", None)
    if hook is not None:
        hook()
