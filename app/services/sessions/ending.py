"""Ending sessions: by their member, by an admin, with a forced config delete, or when a
member leaves (issue 11 item 6, decisions 12).

Ending closes the session's record at once and writes what the provider still holds
(a `SandboxRemoval`) in the same transaction; the container removal itself runs as a job,
so no request waits on a provider. A removal the provider refuses or cannot be reached
for stays in the table and the sweeper (`sweep`, run by the reaper thread beside every
worker) retries it with a growing delay until the provider confirms the sandbox is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update

from app.backends.base import BackendError
from app.errors import Unavailable
from app.extensions import db
from app.models import SandboxConfig, SandboxRemoval, SandboxSession, Tenant
from app.models.types import utcnow
from app.services import Actor, audit, job_limits, jobs
from app.services.sandboxes import incidents, pools
from app.services.sandboxes.provider import backend_for, labels

log = logging.getLogger("sandlot.session_end")
JOB_KIND = "remove_sandboxes"
JOB_TIMEOUT_SEC = job_limits.LIMITS[JOB_KIND]
# Seconds before the n-th retry of a removal the provider did not confirm.
BACKOFF = (30, 60, 300, 900, 3600)
SWEEP_BATCH = 20


@dataclass(frozen=True)
class Ended:
    session_id: str
    job_id: str | None  # None: the queue was down; the sweeper removes the sandbox


# -- ending -----------------------------------------------------------------------------

def end_session(tenant: Tenant, actor: Actor, session: SandboxSession,
                reason: str = "ended") -> Ended:
    """Close `session` now and start the removal of its sandbox as a job."""
    removal = close(tenant, actor, session, reason)
    db.session.commit()
    return Ended(removal.session_id, schedule(removal))


def close(tenant: Tenant, actor: Actor, session: SandboxSession, reason: str) -> SandboxRemoval:
    """Delete the session's record and note its sandbox for removal (joins the caller's
    transaction). The removal also finds sandboxes the session lost track of."""
    removal = SandboxRemoval(tenant_id=tenant.id, sandbox_config_id=session.sandbox_config_id,
                             session_id=session.id, sandbox_id=session.sandbox_id,
                             traffic_token=session.traffic_token, next_attempt_at=utcnow())
    db.session.add(removal)
    data = {"sandbox_config_id": session.sandbox_config_id, "reason": reason}
    if actor.actor_id != session.user_id:
        data["owner_id"] = session.user_id
    audit.record(tenant, actor, "session.deleted", "session", session.id, data)
    pools.session_ended(session.id)
    db.session.delete(session)
    db.session.flush()
    return removal


def schedule(removal: SandboxRemoval) -> str | None:
    """Queue the removal job; a queue that is down leaves the row to the sweeper."""
    try:
        job = jobs.enqueue(JOB_KIND, tenant_id=removal.tenant_id, actor_id=None,
                           target_type="session", target_id=removal.session_id,
                           params={"removal_id": removal.id}, timeout_sec=JOB_TIMEOUT_SEC)
    except Unavailable:
        log.warning("could not queue the removal of session %s's sandbox; the sweeper will",
                    removal.session_id)
        return None
    return job.id


def end_config_sessions(tenant: Tenant, actor: Actor, config: SandboxConfig,
                        live_session_ids: Iterable[str] = ()) -> int:
    """Close every member's sessions on `config` (the inventory drawer's "End these
    sessions", or a delete forced past an unverifiable inventory) and queue removals, also
    for live session sandboxes whose record is already gone (`live_session_ids` from the
    inventory), so none outlives its session."""
    rows = list(db.session.scalars(select(SandboxSession).where(
        SandboxSession.tenant_id == tenant.id, SandboxSession.sandbox_config_id == config.id)))
    removals = [close(tenant, actor, session, "config deleted") for session in rows]
    for session_id in sorted(set(live_session_ids) - {r.session_id for r in removals}):
        removals.append(SandboxRemoval(tenant_id=tenant.id, sandbox_config_id=config.id,
                                       session_id=session_id[:36], next_attempt_at=utcnow()))
        db.session.add(removals[-1])
    db.session.commit()
    for removal in removals:
        schedule(removal)
    return len(removals)


# -- removal (job and sweeper) ----------------------------------------------------------

def remove(removal_id: int) -> str:
    """Delete the sandboxes a removal row names; `removed`, `retry` (kept for the sweeper,
    with the provider's tenant-safe reason) or `gone` (already done). Safe to re-run."""
    removal = db.session.get(SandboxRemoval, removal_id)
    if removal is None:
        return "gone"
    config = db.session.get(SandboxConfig, removal.sandbox_config_id)
    try:
        _delete_at_provider(removal, config)
    except BackendError as exc:
        db.session.rollback()
        log.warning("sandbox of ended session %s not removed: %s", removal.session_id,
                    exc.reason)
        _postpone(removal_id, incidents.conceal(None, exc.reason))
        return "retry"
    except Exception:  # noqa: BLE001 - e.g. a config that no longer decrypts: keep the row
        db.session.rollback()
        log.exception("sandbox of ended session %s not removed", removal_id)
        _postpone(removal_id, "The removal failed unexpectedly; the operator's log has why.")
        return "retry"
    db.session.delete(removal)
    db.session.commit()
    return "removed"


def sweep(now: datetime | None = None, limit: int = SWEEP_BATCH) -> int:
    """Retry the removals that are due (the orphans of unreachable providers); the count
    removed. Each row is claimed by moving its next attempt first, so two sweepers never
    work on the same row at once."""
    now = now or utcnow()
    due = list(db.session.scalars(select(SandboxRemoval.id).where(
        SandboxRemoval.next_attempt_at <= now).order_by(SandboxRemoval.next_attempt_at)
        .limit(limit)))
    removed = 0
    for removal_id in due:
        claimed = db.session.execute(update(SandboxRemoval).where(
            SandboxRemoval.id == removal_id, SandboxRemoval.next_attempt_at <= now)
            .values(next_attempt_at=now + timedelta(seconds=JOB_TIMEOUT_SEC)))
        db.session.commit()
        if claimed.rowcount == 1:
            removed += remove(removal_id) == "removed"
    return removed


def pending_for(tenant: Tenant, config_id: str) -> list[SandboxRemoval]:
    """Removals of `config_id` the provider has not confirmed yet."""
    return list(db.session.scalars(select(SandboxRemoval).where(
        SandboxRemoval.tenant_id == tenant.id, SandboxRemoval.sandbox_config_id == config_id)))


def _delete_at_provider(removal: SandboxRemoval, config: SandboxConfig | None) -> None:
    if config is None:
        return  # the config row is gone, and with it any way to reach its provider
    backend = backend_for(config.config, removal.sandbox_id, removal.traffic_token)
    filter_ = labels(removal.tenant_id, config_id=config.id, session_id=removal.session_id)
    sandbox_id = removal.sandbox_id

    def calls() -> None:
        for sandbox in backend.list(filter_):
            backend.delete(sandbox.id)
        if sandbox_id:
            backend.delete(sandbox_id)

    try:
        # A config's http_timeout_sec may be 600 s per call: the calls together get a
        # budget below the job's limit (job_limits), past which the removal is retried.
        job_limits.bounded(calls, job_limits.REMOVAL_BUDGET_SEC)
    finally:
        backend.close()


def _postpone(removal_id: int, reason: str) -> None:
    removal = db.session.get(SandboxRemoval, removal_id)
    if removal is None:
        return
    delay = BACKOFF[min(removal.attempts, len(BACKOFF) - 1)]
    removal.attempts += 1
    removal.next_attempt_at = utcnow() + timedelta(seconds=delay)
    removal.last_error = reason[:300]
    db.session.commit()
