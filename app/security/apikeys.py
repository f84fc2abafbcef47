"""API key material: `sl_<prefix>_<secret>`, stored only as an HMAC digest."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_PREFIX = "sl_"


@dataclass(frozen=True)
class NewKey:
    plaintext: str
    prefix: str


def new_key() -> NewKey:
    prefix = secrets.token_hex(4)
    return NewKey(plaintext=f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}", prefix=prefix)


def parse_prefix(plaintext: str) -> str | None:
    """The public prefix of a presented key, or None when it is not shaped like ours."""
    if not plaintext.startswith(KEY_PREFIX):
        return None
    prefix, sep, secret = plaintext[len(KEY_PREFIX):].partition("_")
    if not sep or len(prefix) != 8 or not secret:
        return None
    return prefix


def digest(plaintext: str, pepper: str) -> str:
    return hmac.new(pepper.encode(), plaintext.encode(), hashlib.sha256).hexdigest()


def matches(plaintext: str, stored_digest: str, pepper: str) -> bool:
    return hmac.compare_digest(digest(plaintext, pepper), stored_digest)
