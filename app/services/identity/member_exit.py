"""What leaves with a member (decisions 11): the API keys they created are revoked and
their personal variable values deleted at once, in the removal's transaction; their
sessions' sandboxes are destroyed by a job, because a provider may be slow."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy import func, select

from app.errors import Unavailable
from app.extensions import db
from app.models import ApiKey, Membership, SandboxSession, Tenant, User
from app.models.types import utcnow
from app.services import Actor, audit, job_limits, jobs
from app.services.personal import values as personal_env
from app.services.sessions import ending as session_end

log = logging.getLogger("sandlot.members")
JOB_KIND = "end_member_sessions"


def revoke_keys_of(tenant: Tenant, actor: Actor, user: User,
                   reason: str = "member removed") -> int:
    """Revoke the usable keys `user` created in `tenant` (joins the caller's transaction)."""
    query = select(ApiKey).where(ApiKey.tenant_id == tenant.id, ApiKey.created_by_id == user.id,
                                 ApiKey.revoked_at.is_(None))
    keys = list(db.session.scalars(query))
    for key in keys:
        key.revoked_at = utcnow()
        audit.record(tenant, actor, "api_key.revoked", "api_key", key.id,
                     {"name": key.name, "prefix": key.prefix, "reason": reason})
    return len(keys)


def forget_values_of(tenant: Tenant, actor: Actor, user: User, reason: str) -> int:
    """Delete the personal variable values `user` stored in `tenant` (joins the caller's
    transaction), so someone invited back later starts with none of them. Audited with
    the count only: names and values stay out of the log."""
    count = personal_env.forget_principal(personal_env.Who.user(tenant, user))
    if count:
        audit.record(tenant, actor, "personal_env.forgotten", "user", user.id,
                     {"count": count, "reason": reason})
    return count


def leave(tenant: Tenant, actor: Actor, membership: Membership, reason: str) -> None:
    """Everything a removal does inside its transaction: the audit line, the membership,
    the member's keys and their personal values. The caller commits."""
    user = membership.user
    audit.record(tenant, actor, "member.removed", "membership", membership.id,
                 {"email": user.email, "role": membership.role.value})
    db.session.delete(membership)
    revoke_keys_of(tenant, actor, user, reason)
    forget_values_of(tenant, actor, user, reason)


def delete_user(user: User, actor: Actor) -> int:
    """Delete a user everywhere (`flask users delete`), in one transaction: every
    membership leaves as a removal does, their sessions are closed with their sandboxes
    queued for the removal sweeper, and the user row goes. Returns the sessions closed."""
    closed = 0
    for membership in list(user.memberships):
        tenant = membership.tenant
        leave(tenant, actor, membership, "user deleted")
        query = select(SandboxSession).where(SandboxSession.tenant_id == tenant.id,
                                             SandboxSession.user_id == user.id)
        for session in list(db.session.scalars(query)):
            session_end.close(tenant, actor, session, "user deleted")
            closed += 1
    db.session.delete(user)
    db.session.commit()
    return closed


def schedule_session_end(tenant: Tenant, actor: Actor, user_id: int) -> None:
    """Start the job that ends `user_id`'s sessions in `tenant`, if they have any.

    The membership is already gone, so nobody can reach those sessions meanwhile; a queue
    that is down is logged (the reaper's operator sees it) rather than undoing the removal.
    """
    count = db.session.scalar(select(func.count()).select_from(SandboxSession).where(
        SandboxSession.tenant_id == tenant.id, SandboxSession.user_id == user_id)) or 0
    if not count:
        return
    try:
        jobs.enqueue(JOB_KIND, tenant_id=tenant.id, actor_id=actor.actor_id,
                     target_type="user", target_id=user_id, params={"user_id": user_id})
    except Unavailable:
        log.warning("could not queue the end of %s session(s) of user %s in tenant %s",
                    count, user_id, tenant.id)


def end_sessions(tenant_id: int, user_id: int, note: Callable[[str], None]) -> dict[str, int]:
    """Close a former member's sessions and remove their sandboxes.

    An unreachable provider does not keep a record open: the session is closed, the
    failure noted (the detail goes to the operator's log, not to the job's tenant view)
    and the removal left to the sweeper (session_end.sweep), which retries it.
    A member invited back before this runs keeps their sessions.
    """
    tenant = db.session.get(Tenant, tenant_id)
    if tenant is None or _is_member(tenant_id, user_id):
        return {"ended": 0, "unreachable": 0}
    ended = unreachable = 0
    query = select(SandboxSession).where(SandboxSession.tenant_id == tenant_id,
                                         SandboxSession.user_id == user_id)
    deadline = time.monotonic() + job_limits.MEMBER_EXIT_BUDGET_SEC
    for session in list(db.session.scalars(query)):
        session_id = session.id
        removal = session_end.close(tenant, audit.SystemActor("member removal"), session,
                                    "member removed")
        db.session.commit()
        if time.monotonic() >= deadline:
            # Past the budget the job stays within its limit (job_limits): the closed
            # session's removal row is due now, and the removal sweeper takes it.
            ended += 1
            continue
        if session_end.remove(removal.id) == "retry":
            unreachable += 1
            note(f"session {session_id}: the sandbox provider could not be reached; the "
                 "session is closed and its sandbox will be removed once the provider answers")
        ended += 1
    return {"ended": ended, "unreachable": unreachable}


def _is_member(tenant_id: int, user_id: int) -> bool:
    return db.session.scalar(select(Membership.id).where(
        Membership.tenant_id == tenant_id, Membership.user_id == user_id)) is not None
