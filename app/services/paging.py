"""Keyset pagination shared by every list (issue 15 item 7).

A page is the rows after the last row of the previous page in a fixed order of unique
keys (usually (created_at, id)), never an offset: rows inserted or removed meanwhile
cannot shift a later page, so no row is skipped or shown twice. The entry points turn
the last key into an opaque, signed cursor (`security.cursors`); here it is plain values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, and_, func, or_, select

from app.extensions import db

T = TypeVar("T")
PAGE_DEFAULT, PAGE_MAX = 100, 500


@dataclass(frozen=True)
class Window:
    """Which page: at most `limit` rows after the row whose keys are `after`."""

    limit: int = PAGE_DEFAULT
    after: tuple[Any, ...] | None = None


@dataclass
class Slice(Generic[T]):
    """One page: its rows, whether more follow, the last row's keys and the list's size."""

    rows: list[T]
    more: bool
    last_key: tuple[Any, ...] | None
    total: int | None = None


def keyset(stmt: Select, keys: Sequence[Any], window: Window, *, desc: bool = False,
           count: bool = True, key_of: Callable[[Any], tuple] | None = None,
           scalars: bool = True) -> Slice:
    """Run `stmt` (already limited to the tenant) for one page ordered by `keys`.

    `keys` are columns that together are unique; `key_of` reads them back from a result
    row (by default the attributes of the same names). The total is one COUNT of the same
    filter, cheap at the sizes a workspace has."""
    total = db.session.scalar(select(func.count()).select_from(
        stmt.order_by(None).subquery())) if count else None
    paged = stmt
    if window.after is not None:
        paged = paged.where(_after(keys, window.after, desc))
    order = [k.desc() for k in keys] if desc else list(keys)
    paged = paged.order_by(None).order_by(*order).limit(window.limit + 1)
    result = db.session.execute(paged)
    rows = list(result.scalars() if scalars else result)
    return _cut(rows, window.limit, key_of or _attrs(keys), total)


def count_before(stmt: Select, keys: Sequence[Any], values: Sequence[Any]) -> int:
    """How many rows of `stmt` come before the row whose keys are `values` in the order of
    `keys`: the 0-based position of that row, for a "51-100 of 120" label."""
    before = stmt.where(_after(keys, values, desc=True)).order_by(None)
    return db.session.scalar(select(func.count()).select_from(before.subquery())) or 0


def in_memory(items: Sequence[T], key: Callable[[T], tuple], window: Window) -> Slice[T]:
    """The same paging for a list computed in Python (archive listings, grouped views)."""
    ordered = sorted(items, key=key)
    if window.after is not None:
        after = tuple(window.after)
        ordered = [item for item in ordered if key(item) > after]
    return _cut(ordered, window.limit, key, len(items))


def _cut(rows: list, limit: int, key_of: Callable[[Any], tuple], total: int | None) -> Slice:
    more = len(rows) > limit
    rows = rows[:limit]
    return Slice(rows, more, key_of(rows[-1]) if rows else None, total)


def _attrs(keys: Sequence[Any]) -> Callable[[Any], tuple]:
    names = [k.key for k in keys]
    return lambda row: tuple(getattr(row, name) for name in names)


def _after(keys: Sequence[Any], values: Sequence[Any], desc: bool):
    """(k1, k2, ...) > (v1, v2, ...) spelled out, so every database uses the index."""
    clauses = []
    for i, column in enumerate(keys):
        equal = [keys[j] == values[j] for j in range(i)]
        beyond = column < values[i] if desc else column > values[i]
        clauses.append(and_(*equal, beyond))
    return or_(*clauses)
