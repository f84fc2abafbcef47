"""The two-tenant world of `tests.factories.populate`, built once through the real services
and then restored row by row before each sweep test.

Building it costs eight password hashes (seconds on a busy machine); a sweep runs one test
per route, so it copies the rows back instead. The conftest wipes every table after each
test, so a restore always starts from empty tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Integer, func, select, text

from app.extensions import db
from app.models import Role, Tenant, User
from tests import factories

_SAVED: dict[str, tuple[Any, dict[str, list[dict[str, Any]]]]] = {}


def built_once(name: str, build: Callable[[], Any]) -> Any:
    """Run `build` (real services, on empty tables) the first time; afterwards copy back the
    rows it left and return what it returned then (plain ids, never ORM objects)."""
    if name not in _SAVED:
        ids = build()
        _SAVED[name] = (ids, _dump())
        return ids
    ids, rows = _SAVED[name]
    _load(rows)
    return ids


def two_tenants() -> tuple[factories.TenantUsers, factories.TenantUsers]:
    """Tenants A and B, each with an owner, admin, contributor and viewer."""

    def build():
        worlds = factories.populate("Tenant A"), factories.populate("Tenant B")
        return [(w.tenant.id, {r: u.id for r, u in w.by_role.items()}) for w in worlds]

    return tuple(_rebuild(tenant_id, users) for tenant_id, users in built_once("two", build))


def _rebuild(tenant_id: int, users: dict[Role, int]) -> factories.TenantUsers:
    world = factories.TenantUsers(db.session.get(Tenant, tenant_id))
    for role, user_id in users.items():
        world.by_role[role] = db.session.get(User, user_id)
    return world


def _dump() -> dict[str, list[dict[str, Any]]]:
    with db.engine.connect() as conn:
        return {t.name: [dict(r._mapping) for r in conn.execute(t.select())]
                for t in db.metadata.sorted_tables}


def _load(rows: dict[str, list[dict[str, Any]]]) -> None:
    db.session.remove()
    with db.engine.begin() as conn:
        for table in db.metadata.sorted_tables:
            if rows.get(table.name):
                conn.execute(table.insert(), rows[table.name])
        if conn.dialect.name == "postgresql":
            _advance_sequences(conn)


def _advance_sequences(conn) -> None:
    """Explicit ids do not move PostgreSQL sequences; move them past the copied rows."""
    for table in db.metadata.sorted_tables:
        pk = list(table.primary_key.columns)
        if len(pk) != 1 or not isinstance(pk[0].type, Integer):
            continue
        top = conn.scalar(select(func.max(pk[0])))
        if top is not None:
            conn.execute(text("SELECT setval(pg_get_serial_sequence(:t, :c), :v)"),
                         {"t": table.name, "c": pk[0].name, "v": top})
