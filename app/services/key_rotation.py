"""Key rotation for every encrypted column: re-encrypt under the newest SECRETS_KEYS entry.

A value no configured key opens (its key was lost or rotated away) is left as it is and
reported by row id, never by value: one unreadable row does not stop the rotation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import Table, Text, select, type_coerce

from app.extensions import db
from app.models.types import ENCRYPTED_TYPES, SecretFieldsJSON
from app.security import config_secrets
from app.security.crypto import crypto


@dataclass
class RotationReport:
    rotated: dict[str, int] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, list[str]] = field(default_factory=dict)

    @property
    def total_rotated(self) -> int:
        return sum(self.rotated.values())

    @property
    def total_unreadable(self) -> int:
        return sum(len(ids) for ids in self.unreadable.values())

    def lines(self) -> list[str]:
        if not self.rotated:
            return ["no encrypted columns hold values"]
        lines = [f"{col}: {self.rotated[col]} re-encrypted, {self.current[col]} already current"
                 for col in sorted(self.rotated)]
        lines += [f"{col}: {len(ids)} rows hold values no key opens (left as they are; their "
                  f"secrets need re-entry): ids {', '.join(ids)}"
                  for col, ids in sorted(self.unreadable.items()) if ids]
        lines.append(f"total: {self.total_rotated} values re-encrypted")
        if self.total_unreadable:
            lines.append(f"total: {self.total_unreadable} rows could not be read")
        return lines


def encrypted_columns(tables: list[Table] | None = None) -> list[tuple[Table, str]]:
    tables = tables if tables is not None else list(db.metadata.sorted_tables)
    return [
        (table, column.name)
        for table in tables
        for column in table.columns
        if isinstance(column.type, ENCRYPTED_TYPES)
    ]


def rotate_all(tables: list[Table] | None = None) -> RotationReport:
    """Re-encrypt every stored token in one transaction; report counts per column and the
    ids of rows holding a token no configured key opens (those are left unchanged)."""
    report = RotationReport()
    for table, name in encrypted_columns(tables):
        label = f"{table.name}.{name}"
        counts = _rotate_column(table, name)
        report.rotated[label], report.current[label], report.unreadable[label] = counts
    db.session.commit()
    return report


def _rotate_column(table: Table, name: str) -> tuple[int, int, list[str]]:
    (pk,) = table.primary_key.columns
    raw = type_coerce(table.c[name], Text)  # the stored text, not the decrypted value
    rows = db.session.execute(select(pk, raw).where(table.c[name].is_not(None))).all()
    per_secret = isinstance(table.c[name].type, SecretFieldsJSON)
    rotated = current = 0
    unreadable: list[str] = []
    for row_id, stored in rows:
        new, readable = (_rotate_doc(stored) if per_secret and stored.startswith("{")
                         else _rotate_token(stored))
        if not readable:
            unreadable.append(str(row_id))
        if new == stored:
            current += readable
            continue
        db.session.execute(table.update().where(pk == row_id)
                           .values({name: type_coerce(new, Text)}))
        rotated += 1
    return rotated, current, unreadable


def _rotate_token(token: str) -> tuple[str, bool]:
    """(the token under the newest key, whether any key opened it)."""
    if crypto().is_current(token):
        return token, True
    if crypto().try_decrypt(token) is None:
        return token, False
    return crypto().rotate(token), True


def _rotate_doc(stored: str) -> tuple[str, bool]:
    """A per-secret config document with each secret it can open re-encrypted; the ones
    it cannot stay as they are (still "needs re-entry")."""
    doc = json.loads(stored)
    readable, changed = True, False

    def rotate(_path: str, token: str) -> str:
        nonlocal readable, changed
        new, ok = _rotate_token(token)
        readable, changed = readable and ok, changed or new != token
        return new

    config_secrets.transform(doc, rotate)
    return (json.dumps(doc, sort_keys=True) if changed else stored), readable
