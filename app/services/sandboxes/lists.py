"""Pages of a workspace's sandbox configs (issue 15 item 7): the API's list (oldest
first) and the Sandboxes page's cards (by name, filtered, counted by backend)."""

from __future__ import annotations

from sqlalchemy import func, or_, select

from app.extensions import db
from app.models import SandboxConfig, Tenant
from app.services import paging


def _live(tenant: Tenant):
    return select(SandboxConfig).where(SandboxConfig.tenant_id == tenant.id,
                                       SandboxConfig.deleted_at.is_(None))


def configs_page(tenant: Tenant, window: paging.Window, *, by_name: bool = False,
                 name_contains: str = "", sandbox_type: str | None = None,
                 count: bool = True, backwards: bool = False) -> paging.Slice[SandboxConfig]:
    """One page of the workspace's configs: oldest first (the API), or by name with an
    optional case-insensitive filter on name and description (the Sandboxes page).

    `backwards` reads the page that ends just before `window.after` (a Previous link):
    its rows come back in the list's order, `more` says whether rows precede them."""
    query, keys = _query(tenant, by_name, name_contains, sandbox_type)
    page = paging.keyset(query, keys, window, count=count, desc=backwards)
    if backwards:
        page.rows.reverse()
    return page


def position(tenant: Tenant, row: SandboxConfig, *, by_name: bool = False,
             name_contains: str = "", sandbox_type: str | None = None) -> int:
    """How many configs of the same list come before `row` (its 0-based position)."""
    query, keys = _query(tenant, by_name, name_contains, sandbox_type)
    return paging.count_before(query, keys, tuple(getattr(row, k.key) for k in keys))


def _query(tenant: Tenant, by_name: bool, name_contains: str, sandbox_type: str | None):
    query = _matching(tenant, name_contains)
    if sandbox_type:
        query = query.where(SandboxConfig.sandbox_type == sandbox_type)
    keys = (SandboxConfig.name, SandboxConfig.id) if by_name else \
        (SandboxConfig.created_at, SandboxConfig.id)
    return query, keys


def count_by_backend(tenant: Tenant, name_contains: str = "") -> dict[str, int]:
    """How many live configs each backend has (those matching the filter)."""
    query = _matching(tenant, name_contains).with_only_columns(
        SandboxConfig.sandbox_type, func.count()).group_by(SandboxConfig.sandbox_type)
    return {kind: count for kind, count in db.session.execute(query).all()}


def _matching(tenant: Tenant, name_contains: str):
    query = _live(tenant)
    if name_contains:
        pattern = f"%{_escape_like(name_contains.lower())}%"
        query = query.where(or_(func.lower(SandboxConfig.name).like(pattern, escape="\\"),
                                func.lower(SandboxConfig.description).like(pattern,
                                                                           escape="\\")))
    return query


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
