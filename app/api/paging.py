"""The one pagination helper of the JSON API (issue 15 item 7).

Every list route parses `PageQuery` (or a subclass with its filters), asks its service
for one `Window` and answers with `ok_page`: `data` stays the array, with `next_cursor`
(null on the last page) and `total` beside it. The cursor is bound to the route, its
path arguments, the filters and the workspace, so it never opens another list.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flask import current_app, g, request
from pydantic import Field

from app.api._core import Strict, ok
from app.errors import ValidationFailed
from app.security import cursors
from app.services.paging import PAGE_DEFAULT, PAGE_MAX, Slice, Window

BAD_CURSOR = ("This cursor does not belong to this list (or was changed): leave it out "
              "to start again from the first page.")


class PageQuery(Strict):
    limit: int = Field(default=PAGE_DEFAULT, ge=1, le=PAGE_MAX,
                       description=f"Rows per page (default {PAGE_DEFAULT}, at most {PAGE_MAX})")
    cursor: str | None = Field(default=None, max_length=2000,
                               description="`next_cursor` of the previous page; leave it out "
                                           "for the first page")


def _scope(filters: dict[str, Any]) -> str:
    tenant = getattr(getattr(g, "principal", None), "tenant_id", None)
    return json.dumps([request.endpoint, tenant,
                       {k: str(v) for k, v in (request.view_args or {}).items()},
                       {k: v for k, v in filters.items() if k not in ("limit", "cursor")}],
                      sort_keys=True, default=str)


def window(query: PageQuery) -> Window:
    """The page `query` asks for; a cursor not issued for this very list is a 400."""
    scope = _scope(query.model_dump())
    g.page_scope = scope
    if query.cursor is None:
        return Window(query.limit)
    try:
        after = cursors.open_(current_app.secret_key, scope, query.cursor)
    except cursors.BadCursor:
        raise ValidationFailed.one("cursor", BAD_CURSOR) from None
    return Window(query.limit, after)


def ok_page(page: Slice, out: Callable[[Any], Any], **siblings: Any):
    """The success envelope of one page; `out` projects each row."""
    cursor = cursors.seal(current_app.secret_key, g.page_scope, page.last_key) \
        if page.more and page.last_key is not None else None
    return ok([out(row) for row in page.rows], next_cursor=cursor, total=page.total,
              **siblings)
