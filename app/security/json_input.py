"""Untrusted JSON parsed with bounds: depth, encoding and the constants JSON does not have.

Python's parser recurses once per nesting level, so a body of `[[[[...` raises
RecursionError (a 500) or, just under the limit, leaves a structure deep enough to blow the
stack of whatever walks it next. Every JSON body the app reads goes through `loads_bounded`
(the API's `read_json` and, through the app's JSON provider, any `request.get_json`).
"""

from __future__ import annotations

import json
from typing import Any

from flask.json.provider import DefaultJSONProvider

DEFAULT_MAX_DEPTH = 32


class BadJSON(ValueError):
    """The body is not JSON the app accepts; `message` is safe to show the caller."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


NOT_JSON = "The body is not valid JSON."
TOO_DEEP = "The JSON body is nested too deeply (at most {} levels)."
NOT_UTF8 = "The JSON body is not valid UTF-8 text."


def _refuse_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON value.")


def loads_bounded(data: bytes | bytearray | str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse `data`, refusing anything deeper than `max_depth` or not encodable as UTF-8."""
    if isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(data).decode("utf-8")  # JSON on the wire is UTF-8 (RFC 8259 8.1)
        except UnicodeDecodeError:
            raise BadJSON(NOT_UTF8) from None
    data = data.removeprefix("\ufeff")
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except RecursionError:
        raise BadJSON(TOO_DEEP.format(max_depth)) from None
    except BadJSON:
        raise
    except ValueError:  # syntax errors, and integers past the interpreter's digit limit
        raise BadJSON(NOT_JSON) from None
    _check(value, max_depth)
    return value


def _check(value: Any, max_depth: int) -> None:
    """Walk without recursion: the depth bound and no lone surrogates (they cannot be
    stored or echoed as UTF-8, and would fail later as a 500)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _utf8(item)
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > max_depth:
            raise BadJSON(TOO_DEEP.format(max_depth))
        if isinstance(item, dict):
            for key, sub in item.items():
                _utf8(key)
                stack.append((sub, depth + 1))
        else:
            stack.extend((sub, depth + 1) for sub in item)


def _utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadJSON(NOT_UTF8) from None


class BoundedJSONProvider(DefaultJSONProvider):
    """Flask's JSON provider with bounded parsing, so `request.get_json` is safe anywhere."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return loads_bounded(s, self._app.config.get("JSON_MAX_DEPTH", DEFAULT_MAX_DEPTH))
