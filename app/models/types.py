"""Column types shared by the models."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Text
from sqlalchemy.types import TypeDecorator

from app.security import config_secrets
from app.security.config_secrets import LostDocument, LostMapping, LostSecret
from app.security.crypto import crypto


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes on every database (SQLite drops the offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class PrintedText(TypeDecorator):
    """Text a sandbox or an install printed: any characters it sent are kept, except that
    NUL, which PostgreSQL text cannot hold, is stored as U+FFFD on every database."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect) -> str | None:
        return value.replace("\x00", "\ufffd") if value else value


class EncryptedText(TypeDecorator):
    """A string encrypted at rest with the app's MultiFernet; plaintext in Python.

    A token no configured key opens reads as a LostSecret (unset, flagged) instead of
    failing every request that touches the row; written back unchanged it keeps its token.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect) -> str | None:
        if isinstance(value, LostSecret) and value.token:
            return value.token
        return None if value is None else crypto().encrypt(value)

    def process_result_value(self, value: str | None, dialect) -> str | None:
        if value is None:
            return None
        plain = crypto().try_decrypt(value)
        return LostSecret(value) if plain is None else plain


class EncryptedJSON(TypeDecorator):
    """A JSON document encrypted at rest as one token (a lost key reads as LostMapping)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> str | None:
        if isinstance(value, LostMapping) and value.token:
            return value.token
        return None if value is None else crypto().encrypt(json.dumps(value, sort_keys=True))

    def process_result_value(self, value: str | None, dialect) -> Any:
        if value is None:
            return None
        plain = crypto().try_decrypt(value)
        return LostMapping(value) if plain is None else json.loads(plain)


class SecretFieldsJSON(TypeDecorator):
    """A sandbox config document as JSON whose secrets are encrypted one by one
    (security.config_secrets lists where they sit).

    A secret no configured key opens reads as a LostSecret: the config still lists,
    runs what it can and says which secrets need re-entry (reference 1.3). Rows stored
    before this format hold the whole document as one token; they still read (and the
    migration that introduced this type rewrote every one it could open).
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> str | None:
        if isinstance(value, LostDocument) and value.token:
            return value.token  # written back unchanged: still recoverable with the old key
        return None if value is None else json.dumps(seal_secrets(value), sort_keys=True)

    def process_result_value(self, value: str | None, dialect) -> Any:
        if value is None:
            return None
        if not value.startswith("{"):  # the whole-document token of an older row
            plain = crypto().try_decrypt(value)
            return LostDocument(value) if plain is None else json.loads(plain)
        return open_secrets(json.loads(value))


def seal_secrets(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of `doc` with each set secret encrypted (a lost one keeps its token)."""
    def seal(_path: str, value: str) -> str:
        return value.token if isinstance(value, LostSecret) else crypto().encrypt(value)

    return config_secrets.transform(copy.deepcopy(doc), seal)


def open_secrets(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with each secret decrypted in place, or a LostSecret where no key opens it."""
    def unseal(_path: str, token: str) -> str:
        plain = crypto().try_decrypt(token)
        return LostSecret(token) if plain is None else plain

    return config_secrets.transform(doc, unseal)


ENCRYPTED_TYPES = (EncryptedText, EncryptedJSON, SecretFieldsJSON)


def utcnow() -> datetime:
    return datetime.now(UTC)
