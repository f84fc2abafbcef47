"""Opaque page cursors (issue 15 item 7): the last row's keys, bound to one list of one
workspace and signed with the app's secret key.

A cursor from another list, another workspace or with any byte changed does not open:
the caller gets a clear 400 instead of rows. The keys travel as JSON with datetimes
tagged, so they come back with the types the query compares them to.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from itsdangerous import BadData, URLSafeSerializer

SALT = "sandlot.page-cursor.v1"


class BadCursor(ValueError):
    """The cursor was not issued for this list (garbled, forged or from elsewhere)."""


def seal(secret: str, scope: str, keys: tuple[Any, ...]) -> str:
    return URLSafeSerializer(secret, salt=SALT).dumps({"s": scope, "k": [_out(k) for k in keys]})


def open_(secret: str, scope: str, token: str) -> tuple[Any, ...]:
    try:
        payload = URLSafeSerializer(secret, salt=SALT).loads(token)
    except (BadData, ValueError, TypeError):
        raise BadCursor() from None
    if not isinstance(payload, dict) or payload.get("s") != scope \
            or not isinstance(payload.get("k"), list):
        raise BadCursor()
    return tuple(_in(k) for k in payload["k"])


def _out(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"dt": value.isoformat()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # enums and UUIDs compare as their text


def _in(value: Any) -> Any:
    if isinstance(value, dict):
        try:
            return datetime.fromisoformat(value["dt"])
        except (KeyError, TypeError, ValueError):
            raise BadCursor() from None
    if isinstance(value, list):
        raise BadCursor()
    return value
