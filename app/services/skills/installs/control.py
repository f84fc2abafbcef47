"""Stop a run, and reap runs whose worker died (reference 7.2, 7.6).

Stop is a row write any process can make: the run's watcher sees it within a second and
kills the maintenance sandbox; a run that is only queued never starts (its job is ended
here). The reaper ends rows whose job is over while the row still says `installing` or
`removing` (a `kill -9`), and rows silent for the stuck TTL (60 min), and frees the
image lock they held.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from flask import current_app
from sqlalchemy import select, update

from app.backends.base import BackendError
from app.extensions import db
from app.models import (
    EventKind,
    InstalledSkill,
    InstallStatus,
    Job,
    JobStatus,
    SandboxConfig,
    SkillSnapshot,
    SnapshotState,
)
from app.models.types import utcnow
from app.services import jobs as job_service
from app.services.sandboxes import image
from app.services.sandboxes.provider import backend_for, labels
from app.services.skills.installs import lock
from app.services.skills.installs.events import EventLog

log = logging.getLogger("sandlot.skills.install")
STOPPED = "install stopped"
STUCK_DEFAULT = 3600
FRESH = timedelta(minutes=3)


def stop(row: InstalledSkill) -> bool:
    """Mark an installing row failed with "install stopped"; True if this call did it."""
    now = utcnow()
    result = db.session.execute(update(InstalledSkill).where(
        InstalledSkill.id == row.id, InstalledSkill.status == InstallStatus.installing,
        InstalledSkill.deleted_at.is_(None)).values(
        status=InstallStatus.failed, error=STOPPED, stop_requested_at=now,
        installing_since=None, updated_at=now))
    db.session.commit()
    if result.rowcount != 1:
        return False
    db.session.refresh(row)
    if row.job_id:  # a queued run never starts; a running one ends itself within a second
        db.session.execute(update(Job).where(Job.id == row.job_id,
                                             Job.status == JobStatus.pending)
                           .values(status=JobStatus.cancelled, error=STOPPED,
                                   finished_at=utcnow()))
        db.session.commit()
    if row.install_message_id:
        EventLog(row.tenant_id, row.id, row.install_message_id).emit(
            "failed", 100, kind=EventKind.error, message=STOPPED, status="failed")
    return True


def is_silent(row: InstalledSkill) -> bool:
    """True when the row's run shows no sign of life: its job ended, or no heartbeat for
    the fresh-run window of reference 7.1 (3 minutes)."""
    job = db.session.get(Job, row.job_id) if row.job_id else None
    if job is not None and job.is_terminal:
        return True
    return row.installing_since is None or row.installing_since < utcnow() - FRESH


def reap(stuck_seconds: int | None = None) -> int:
    """End install/removal rows whose run is dead; the number ended."""
    stuck = stuck_seconds or int(current_app.config.get("SKILL_INSTALL_STUCK_SECONDS",
                                                        STUCK_DEFAULT))
    silent_since = utcnow() - timedelta(seconds=stuck)
    rows = db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.status.in_([InstallStatus.installing, InstallStatus.removing]),
        InstalledSkill.deleted_at.is_(None)))
    ended = 0
    for row in list(rows):
        job = db.session.get(Job, row.job_id) if row.job_id else None
        job_over = job is not None and job.is_terminal
        silent = row.installing_since is None or row.installing_since < silent_since
        if job_over or silent:
            ended += _end(row, _why_over(job) if job_over else
                          f"no sign of life for {stuck // 60} minutes")
    return ended


def _why_over(job: Job) -> str:
    """A run stopped at its kind's time limit says so on the skill's row too."""
    if job.status == JobStatus.failed and (job.error or "").startswith("Stopped at its time"):
        return job.error.rstrip(".")
    return "its worker stopped"


def _end(row: InstalledSkill, why: str) -> bool:
    removing = row.status == InstallStatus.removing
    in_image = bool(row.installed_snapshot_id or row.served)
    status = InstallStatus.ready if removing and in_image else InstallStatus.failed
    message = f"The {'removal' if removing else 'install'} did not finish: {why}."
    result = db.session.execute(update(InstalledSkill).where(
        InstalledSkill.id == row.id, InstalledSkill.status == row.status,
        InstalledSkill.job_id == row.job_id).values(
        status=status, error=message, installing_since=None, updated_at=utcnow()))
    db.session.commit()
    if result.rowcount != 1:
        return False
    if row.job_id:
        job_service.finish(row.job_id, JobStatus.errored, error=message)
    if row.install_message_id:
        lock.release(row.tenant_id, row.sandbox_config_id, row.install_message_id)
        EventLog(row.tenant_id, row.id, row.install_message_id).emit(
            "failed", 100, kind=EventKind.error, message=message, status=str(status))
    _release_abandoned(row)
    return True


def _delete_maintenance_sandbox(backend, row: InstalledSkill) -> None:
    """The dead run's maintenance sandbox, found by its metadata."""
    if not row.install_message_id:
        return
    for sandbox in backend.list(labels(row.tenant_id, session_id=f"run-{row.install_message_id}",
                                       purpose="install")):
        backend.delete(sandbox.id)


def _release_abandoned(row: InstalledSkill) -> None:
    """What the dead run left behind: its maintenance sandbox, and builds it never
    switched to."""
    config = db.session.get(SandboxConfig, row.sandbox_config_id)
    current = image.current_snapshot(config.config) if config is not None else None
    builds = [ledger for ledger in db.session.scalars(select(SkillSnapshot).where(
        SkillSnapshot.skill_id == row.id,
        SkillSnapshot.state.in_([SnapshotState.building, SnapshotState.active])))
        if ledger.snapshot_id != current]
    if config is None:
        return
    backend = backend_for(config.config)
    try:
        _delete_maintenance_sandbox(backend, row)
        for ledger in builds:
            image.release(backend, ledger)
    except BackendError as exc:
        log.warning("abandoned snapshot of %s not released: %s", row.id, exc.reason)
    finally:
        backend.close()
