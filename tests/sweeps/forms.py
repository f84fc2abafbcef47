"""HTML forms read from rendered pages, so POST routes can be sent plausible form data
without a hand-written list of fields per route."""

from __future__ import annotations

import html
import re
import secrets
from urllib.parse import urlsplit

FORM = re.compile(r"<form\b([^>]*)>(.*?)</form>", re.S | re.I)
ATTR = re.compile(r'([\w:-]+)\s*=\s*"([^"]*)"')
FIELD = re.compile(r"<(input|select|textarea)\b([^>]*)>", re.I)
OPTION = re.compile(r'<option\b[^>]*value="([^"]*)"', re.I)
INPUT_EXAMPLES = {"date": "2099-01-01", "datetime-local": "2099-01-01T00:00", "number": "1",
                  "url": "https://example.test/"}


def forms_in(page: str, page_path: str, secret: str = "sweep-Password-123",
             ) -> dict[str, dict[str, str]]:
    """{target path: {field: plausible value}} for every POST form on a page (its action or
    hx-post; a form with neither posts back to `page_path`).

    Secret-looking fields get `secret`, email fields a new address, selects their last
    option, checkboxes their value, anything else its value or a word.
    """
    found: dict[str, dict[str, str]] = {}
    for attrs, inner in FORM.findall(page):
        attrs = dict(ATTR.findall(attrs))
        if attrs.get("method", "get").lower() != "post" and "hx-post" not in attrs:
            continue
        target = urlsplit(html.unescape(attrs.get("hx-post") or attrs.get("action") or "")).path
        found.setdefault(target or page_path, _fields(inner, secret))
    return found


def _fields(inner: str, secret: str) -> dict[str, str]:
    values = {}
    for tag, attrs in FIELD.findall(inner):
        attrs = dict(ATTR.findall(attrs))
        name, kind = attrs.get("name"), attrs.get("type", "text").lower()
        if not name or name == "csrf_token":
            continue
        if kind == "password" or "password" in name or "secret" in name:
            values[name] = secret
        elif kind == "email" or "email" in name:
            values[name] = f"new-{secrets.token_hex(4)}@sweep.test"
        elif tag.lower() == "select":
            options = OPTION.findall(inner.split(f'name="{name}"', 1)[1])
            values[name] = options[-1] if options else ""
        elif kind in ("checkbox", "radio"):
            values[name] = attrs.get("value", "y")
        elif kind in INPUT_EXAMPLES:
            values[name] = INPUT_EXAMPLES[kind]
        else:
            values[name] = attrs.get("value") or "sweep"
    return values
