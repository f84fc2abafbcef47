"""The one check every user-supplied redirect target goes through.

Browsers forgive a lot: they drop tabs and newlines anywhere in a URL, read `\\` as `/`,
and treat `//host` as another site. So a target passes only if it is a plain same-site
path in every spelling: as given, and after percent-decoding (repeatedly, for double
encodings) it starts with exactly one `/`, has no backslash, and no control, format or
non-ASCII whitespace character.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import unquote, urlsplit

from flask import url_for

_DECODE_ROUNDS = 4
_REFUSED_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Zs"}


def safe_next(target: str | None, fallback: str | None = None) -> str:
    """`target` when it is a same-site relative path, else `fallback` (the dashboard)."""
    if target and is_same_site_path(target):
        return target
    return fallback or url_for("web.dashboard")


def is_same_site_path(target: str) -> bool:
    if not _plain_path(target, decoded=False):
        return False
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return False
    decoded = target
    for _ in range(_DECODE_ROUNDS):
        decoded, previous = unquote(decoded), decoded
        if not _plain_path(decoded, decoded=True):
            return False
        if decoded == previous:
            return True
    return False  # still changing after several rounds: nobody links like that


def _plain_path(text: str, *, decoded: bool) -> bool:
    if not text.startswith("/") or text.startswith("//") or "\\" in text:
        return False
    # An encoded space (`%20`) is an ordinary path character once decoded.
    return not any(unicodedata.category(ch) in _REFUSED_CATEGORIES
                   and not (decoded and ch == " ") for ch in text)
