"""CSV that spreadsheets open as data, never as formulas (OWASP "CSV Injection").

A cell starting with =, +, -, @, tab or carriage return is evaluated by Excel, LibreOffice
and Google Sheets; an audit row carries text members choose (emails, key names), so such a
cell gets a leading apostrophe, which spreadsheets show as text. Quotes and separators
inside a cell are quoted by the csv module as usual.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: Any) -> Any:
    """A cell safe to open in a spreadsheet; numbers and safe text are left alone."""
    if isinstance(value, str) and value.startswith(FORMULA_TRIGGERS):
        return "'" + value
    return value


def writer(out: io.StringIO) -> Any:
    return csv.writer(out)


def write_row(out_writer: Any, row: Iterable[Any]) -> None:
    out_writer.writerow([neutralise(cell) for cell in row])


def rewrite(text: str) -> str:
    """`text` with every cell neutralised (idempotent: an apostrophe is no trigger);
    returned as it is when no cell needs it."""
    rows = list(csv.reader(io.StringIO(text)))
    if not any(neutralise(cell) is not cell for row in rows for cell in row):
        return text
    out = io.StringIO()
    out_writer = writer(out)
    for row in rows:
        write_row(out_writer, row)
    return out.getvalue()
