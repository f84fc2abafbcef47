"""The audit trail. `record` joins the caller's transaction; it never commits."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, or_, select

from app.extensions import db
from app.models import AuditEvent, Tenant
from app.security import csv_safe
from app.services import Actor


class SystemActor:
    """The actor for CLI and other out-of-request mutations."""

    actor_id = None

    def __init__(self, label: str = "system"):
        self.actor_label = label


def record(
    tenant: Tenant, actor: Actor, action: str, object_type: str, object_id: Any = None,
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    event = AuditEvent(
        tenant_id=tenant.id, actor_id=actor.actor_id, actor_label=actor.actor_label,
        action=action, object_type=object_type,
        object_id=None if object_id is None else str(object_id), data=data or {},
    )
    db.session.add(event)
    return event


def list_recent(tenant: Tenant, limit: int = 20) -> list[AuditEvent]:
    query = (
        select(AuditEvent).where(AuditEvent.tenant_id == tenant.id)
        .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc()).limit(limit)
    )
    return list(db.session.scalars(query))


# The activity page's action filter: a kind of thing and the action codes it covers.
KINDS = {
    "members": ("Members and invitations", ("member.", "invitation.")),
    "keys": ("API keys", ("api_key.",)),
    "configs": ("Sandbox configs", ("sandbox_config.", "egress_access.")),
    "skills": ("Skills", ("skill_catalog.", "installed_skill.")),
    "sessions": ("Sessions", ("session.",)),
    "workspace": ("Workspace settings", ("workspace.",)),
}
PAGE_SIZE = 50


def page(tenant: Tenant, kind: str = "", actor_id: int | None = None,
         before: int | None = None, limit: int = PAGE_SIZE) -> tuple[list[AuditEvent], int | None]:
    """One page of the workspace's activity, newest first, filtered by kind of action
    (a key of KINDS) and by who did it; returns the events and the id to continue before
    (None on the last page). Keyed by id, so new events do not shift later pages."""
    query = select(AuditEvent).where(AuditEvent.tenant_id == tenant.id)
    if kind in KINDS:
        query = query.where(or_(*(AuditEvent.action.startswith(p) for p in KINDS[kind][1])))
    if actor_id is not None:
        query = query.where(AuditEvent.actor_id == actor_id)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    rows = list(db.session.scalars(query.order_by(AuditEvent.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1].id if more and rows else None)


def count(tenant_id: int) -> int:
    query = select(func.count()).select_from(AuditEvent).where(AuditEvent.tenant_id == tenant_id)
    return db.session.scalar(query) or 0


def iter_events(tenant_id: int, batch: int = 500) -> Iterable[AuditEvent]:
    query = (
        select(AuditEvent).where(AuditEvent.tenant_id == tenant_id)
        .order_by(AuditEvent.id).execution_options(yield_per=batch)
    )
    yield from db.session.scalars(query)


CSV_COLUMNS = ["id", "created_at", "actor", "action", "object_type", "object_id"]


def to_csv(events: Iterable[AuditEvent]) -> tuple[str, int]:
    """The events as CSV text, every cell safe to open in a spreadsheet, and the row count."""
    out = io.StringIO()
    writer = csv_safe.writer(out)
    csv_safe.write_row(writer, CSV_COLUMNS)
    rows = 0
    for event in events:
        csv_safe.write_row(writer, [
            event.id, event.created_at.isoformat(), event.actor_label, event.action,
            event.object_type, event.object_id or "",
        ])
        rows += 1
    return out.getvalue(), rows
