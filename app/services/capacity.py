"""Shared capacity held for a while, counted across processes (issue 26): open web
terminals, file transfers of a session's sandbox.

Each use is a `capacity_holds` row for as long as it lasts; every process counts the same
rows. A long use refreshes its row (`refresh`); a row not refreshed for STALE_SEC (its
process died) stops counting. Past a limit the answer is 429 `quota_exceeded` naming the
limit and the use.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, select, update

from app.extensions import db
from app.models import CapacityHold, Tenant
from app.models.types import utcnow
from app.services.quotas import OverQuota

STALE_SEC = 45


@dataclass(frozen=True)
class Limit:
    name: str  # the quota's name in the 429: "terminals_per_session"
    scope: str  # "session", "member" or "workspace"
    limit: int


@dataclass(frozen=True)
class Use:
    kind: str  # "terminal", "file_transfer"
    tenant_id: int
    user_id: int
    session_id: str


def check(use: Use, limits: tuple[Limit, ...], noun: str, advice: str) -> None:
    """429 when one more `use` would be past a limit (nothing is held)."""
    live = (CapacityHold.kind == use.kind) & \
        (CapacityHold.seen_at > utcnow() - timedelta(seconds=STALE_SEC))
    counted = {"session": CapacityHold.session_id == use.session_id,
               "member": CapacityHold.user_id == use.user_id}
    counts = db.session.execute(select(*(
        func.count().filter(counted[limit.scope]) if limit.scope in counted else func.count()
        for limit in limits)).where(CapacityHold.tenant_id == use.tenant_id, live)).one()
    for limit, used in zip(limits, counts, strict=True):
        if used >= limit.limit:
            db.session.rollback()
            raise OverQuota.of(limit.name, limit.limit, used, (
                f"A {limit.scope} may have at most {limit.limit} {noun} at once, and {used} "
                f"{'is' if used == 1 else 'are'} in use; {advice}"))


def admit(use: Use, limits: tuple[Limit, ...], noun: str, advice: str) -> str:
    """Hold one more `use` (its row's id), or 429. One admission at a time per workspace
    on PostgreSQL (the workspace's row is locked while counting)."""
    db.session.execute(select(Tenant.id).where(Tenant.id == use.tenant_id).with_for_update())
    check(use, limits, noun, advice)
    hold = CapacityHold(id=str(uuid.uuid4()), kind=use.kind, tenant_id=use.tenant_id,
                        user_id=use.user_id, session_id=use.session_id)
    db.session.add(hold)
    db.session.commit()
    return hold.id


def refresh(hold_id: str) -> None:
    db.session.execute(update(CapacityHold).where(CapacityHold.id == hold_id)
                       .values(seen_at=utcnow()))
    db.session.commit()


def release(hold_id: str) -> None:
    db.session.rollback()
    db.session.execute(delete(CapacityHold).where(CapacityHold.id == hold_id))
    db.session.commit()


@contextmanager
def holding(use: Use, limits: tuple[Limit, ...], noun: str, advice: str) -> Iterator[None]:
    """Hold `use` for the block (a use shorter than STALE_SEC: no refresh needed)."""
    hold_id = admit(use, limits, noun, advice)
    try:
        yield
    finally:
        release(hold_id)
