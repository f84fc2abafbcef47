"""Key rotation for every encrypted column: re-encrypt under the newest SECRETS_KEYS entry."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Table, Text, select, type_coerce

from app.extensions import db
from app.models.types import ENCRYPTED_TYPES
from app.security.crypto import crypto


@dataclass
class RotationReport:
    rotated: dict[str, int] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)

    @property
    def total_rotated(self) -> int:
        return sum(self.rotated.values())

    def lines(self) -> list[str]:
        if not self.rotated:
            return ["no encrypted columns hold values"]
        lines = [f"{col}: {self.rotated[col]} re-encrypted, {self.current[col]} already current"
                 for col in sorted(self.rotated)]
        return [*lines, f"total: {self.total_rotated} values re-encrypted"]


def encrypted_columns(tables: list[Table] | None = None) -> list[tuple[Table, str]]:
    tables = tables if tables is not None else list(db.metadata.sorted_tables)
    return [
        (table, column.name)
        for table in tables
        for column in table.columns
        if isinstance(column.type, ENCRYPTED_TYPES)
    ]


def rotate_all(tables: list[Table] | None = None) -> RotationReport:
    """Re-encrypt every stored token in one transaction; report counts per column."""
    report = RotationReport()
    for table, name in encrypted_columns(tables):
        label = f"{table.name}.{name}"
        report.rotated[label], report.current[label] = _rotate_column(table, name)
    db.session.commit()
    return report


def _rotate_column(table: Table, name: str) -> tuple[int, int]:
    (pk,) = table.primary_key.columns
    raw = type_coerce(table.c[name], Text)  # the stored token, not the decrypted value
    rows = db.session.execute(select(pk, raw).where(table.c[name].is_not(None))).all()
    rotated = current = 0
    for row_id, token in rows:
        if crypto().is_current(token):
            current += 1
            continue
        db.session.execute(
            table.update().where(pk == row_id)
            .values({name: type_coerce(crypto().rotate(token), Text)})
        )
        rotated += 1
    return rotated, current
