"""The only way into tenant-owned rows: scoped to the caller's tenant, foreign ids 404."""

from __future__ import annotations

from typing import TypeVar

from flask import g
from sqlalchemy import Select, select

from app.auth.principal import Principal
from app.errors import NotFound
from app.extensions import db

M = TypeVar("M")


def principal() -> Principal:
    return g.principal


def current_tenant():
    return g.principal.tenant


def scoped(model: type[M]) -> Select:
    """A select of `model` limited to the current tenant (and to live rows)."""
    query = select(model).where(model.tenant_id == g.principal.tenant_id)
    if hasattr(model, "deleted_at"):
        query = query.where(model.deleted_at.is_(None))
    return query


# Integer primary keys are 32-bit on PostgreSQL; a larger id from a URL cannot exist, and
# passing it to the driver would fail (500) instead of answering 404.
MAX_INT_ID = 2**31 - 1


def get_or_404(model: type[M], object_id, what: str | None = None) -> M:
    return owned_or_404(model, object_id, g.principal.tenant_id,
                        f"No such {what or model.__name__.lower()} in this workspace.")


def owned_or_404(model: type[M], object_id, tenant_id: int, message: str, *,
                 live: bool = True) -> M:
    """The services' way into a tenant-owned row (they get the tenant as data, never from
    the request): `model` `object_id` of `tenant_id`, and not soft-deleted unless
    `live=False`; anything else is NotFound(message), so a foreign id is a 404."""
    out_of_range = isinstance(object_id, int) and not 0 <= object_id <= MAX_INT_ID
    row = None if object_id is None or out_of_range else db.session.get(model, object_id)
    if row is None or row.tenant_id != tenant_id or (live and _deleted(row)):
        raise NotFound(message)
    return row


def _deleted(row) -> bool:
    return getattr(row, "deleted_at", None) is not None
