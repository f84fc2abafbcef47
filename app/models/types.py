"""Column types shared by the models."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Text
from sqlalchemy.types import TypeDecorator

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


class EncryptedText(TypeDecorator):
    """A string encrypted at rest with the app's MultiFernet; plaintext in Python."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect) -> str | None:
        return None if value is None else crypto().encrypt(value)

    def process_result_value(self, value: str | None, dialect) -> str | None:
        return None if value is None else crypto().decrypt(value)


class EncryptedJSON(TypeDecorator):
    """A JSON document encrypted at rest as one token."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect) -> str | None:
        return None if value is None else crypto().encrypt(json.dumps(value, sort_keys=True))

    def process_result_value(self, value: str | None, dialect) -> Any:
        return None if value is None else json.loads(crypto().decrypt(value))


ENCRYPTED_TYPES = (EncryptedText, EncryptedJSON)


def utcnow() -> datetime:
    return datetime.now(UTC)
