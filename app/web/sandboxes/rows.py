"""The editor form's list rows (env vars, allow/deny entries, cube and e2b rules) and the
small conversions between an input's text and a document value."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from app.security.config_secrets import LostSecret
from app.security.redaction import MASK

TEXT, INT, FLOAT, SECRET, WORDS = "text", "int", "float", "secret", "words"
RULE_FIELDS = ("name", "host", "sni", "scheme", "methods", "path", "action", "audit")
INJECT_FIELDS = ("header", "secret", "format")
CHILD = {"network.cube_rules": "inject", "network.e2b_host_rules": "headers"}


@dataclass
class Row:
    """One list row as the form carries it; `children` are inject or header rows."""

    index: int
    values: dict[str, str] = field(default_factory=dict)
    children: list[Row] = field(default_factory=list)
    stored: bool = False  # its secret has a saved value: blank keeps it
    typed: bool = False  # a secret was typed but not saved (shown after a failed save)
    lost: bool = False  # its stored secret no longer decrypts: it needs re-entry

    def get(self, name: str) -> str:
        return self.values.get(name, "")

    def blank(self) -> bool:
        """Nothing typed: a select left at its default (`action` allow) does not count."""
        typed = [v for k, v in self.values.items() if not (k == "action" and v == "allow")]
        return not any(v.strip() for v in typed) and all(c.blank() for c in self.children)


def place(rows: dict[str, dict[int, Row]], match: re.Match, value: str) -> None:
    key, index, name, child_index, child_name = match.groups()
    row = rows[key].setdefault(int(index), Row(int(index)))
    if child_index is None:
        row.values[name or "value"] = value
        return
    if name != CHILD.get(key):
        return
    child = next((c for c in row.children if c.index == int(child_index)), None)
    if child is None:
        child = Row(int(child_index))
        row.children.append(child)
    child.values[child_name] = value


def put(target: dict[str, Any], key: str, raw: str, kind: str) -> None:
    """A typed value; blank numbers keep the default, and text that is not a number is
    passed through so the validator names the field."""
    value = raw.strip()
    if kind == SECRET:
        target[key] = raw  # "" keeps the stored secret; a value is taken verbatim
    elif kind == TEXT:
        if value:
            target[key] = value
    elif kind == WORDS:
        target[key] = [w for w in re.split(r"[\s,]+", value) if w]
    elif value:
        target[key] = number(value, kind)


def number(value: str, kind: str) -> int | float | str:
    try:
        return int(value) if kind == INT else float(value)
    except ValueError:
        return value


def shown(value: Any) -> str:
    """A stored value in its input: zero and unset numbers show the placeholder default."""
    if value is None or value == 0 or value is False:
        return ""
    return str(value)


def norm(value: str) -> str:
    return value.strip().lower()


def rule_row(index: int, rule: dict[str, Any]) -> Row:
    values = {k: str(rule.get(k) or "") for k in ("name", "host", "sni", "scheme", "path",
                                                  "audit")}
    values["methods"] = ", ".join(rule.get("methods") or [])
    values["action"] = "deny" if rule.get("deny") else "allow"
    children = [Row(j, {"header": str(i.get("header") or ""), "secret": "",
                        "format": str(i.get("format") or "")}, stored=i.get("secret") == MASK,
                    lost=isinstance(i.get("secret"), LostSecret))
                for j, i in enumerate(rule.get("inject") or [])]
    return Row(index, values, children)


def host_row(index: int, rule: dict[str, Any]) -> Row:
    children = [Row(j, {"name": str(name), "value": ""}, stored=value == MASK,
                    lost=isinstance(value, LostSecret))
                for j, (name, value) in enumerate((rule.get("headers") or {}).items())]
    return Row(index, {"host": str(rule.get("host") or "")}, children)


def rule_doc(row: Row) -> dict[str, Any]:
    return {
        "name": row.get("name"), "host": row.get("host"), "sni": row.get("sni"),
        "scheme": row.get("scheme"), "path": row.get("path"), "audit": row.get("audit"),
        "methods": [m for m in re.split(r"[\s,]+", row.get("methods").strip()) if m],
        "deny": row.get("action") == "deny",
        "inject": [{k: c.get(k) for k in INJECT_FIELDS} for c in row.children if not c.blank()],
    }


def with_field(path: str, slot: str | None, message: str) -> str:
    """In a cube rule (or inject) row, name the input an error is about: `host: ...`."""
    part = re.search(r"\]\.(\w+)(?:\[\d+\])?$", path)
    if message.startswith("HTTP rule"):  # already labelled by the service
        return message
    if slot and "cube_rules" in slot and part and part.group(1) in (*RULE_FIELDS,
                                                                      *INJECT_FIELDS):
        return f"{part.group(1)}: {message}"
    return message
