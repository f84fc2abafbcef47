"""Parsing a SKILL.md frontmatter, with the two repairs published skills need.

Skills in the wild often carry frontmatter that strict YAML refuses, and the reference
system repairs two such mistakes before parsing; so do we, and say what was repaired:

- an unquoted value that contains `: ` (`description: Use when: the user asks`), which YAML
  reads as a second mapping on one line: the value is quoted;
- keys indented under the first key (`name: x` then `  description: d`), which YAML reads
  as a continuation of the first value: they are moved back to the top level.

Repairs are tried only when the text as written does not parse, and they are plain
line-by-line string edits (linear in the input, no regular expression that can
backtrack). The result goes through the safe loader only (libyaml's when present, which is
also linear and bounds nesting). Anything still unparsable is refused naming the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A value starting with one of these is not a plain scalar; it is left as written.
NOT_PLAIN = tuple("\"'|>[{&*!%@`#")
MAX_NESTING = 64


@dataclass
class Parsed:
    data: object
    repairs: list[str] = field(default_factory=list)


class FrontmatterError(ValueError):
    """Unparsable frontmatter; `line` counts from the top of the frontmatter text (1-based)."""

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(reason)
        self.reason, self.line = reason, line


def load(text: str) -> Parsed:
    """The frontmatter's value, repaired if it needs (and allows) it."""
    _check_nesting(text)
    try:
        return Parsed(_safe_load(text))
    except yaml.YAMLError as exc:
        first = exc
    repaired, repairs = repair(text)
    if repairs:
        try:
            return Parsed(_safe_load(repaired), repairs)
        except yaml.YAMLError:
            pass
    # Where the parser gave up; when that is the end of the text (an unclosed quote or
    # bracket), where the unfinished construct starts, which is the line to fix.
    mark = getattr(first, "problem_mark", None)
    context = getattr(first, "context_mark", None)
    if context is not None and (mark is None or mark.index >= len(text.rstrip())):
        mark = context
    raise FrontmatterError("not valid YAML", mark.line + 1 if mark is not None else None)


def _safe_load(text: str) -> object:
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 (a safe loader)
    except RecursionError:
        raise FrontmatterError("nested too deeply") from None


def literal(text: str, key: str) -> str:
    """A top-level scalar's text exactly as written (YAML would turn 1.10 into 1.1)."""
    try:
        node = yaml.compose(text, Loader=Loader)
    except yaml.YAMLError:
        node = yaml.compose(repair(text)[0], Loader=Loader)
    for key_node, value_node in getattr(node, "value", []):
        if getattr(key_node, "value", None) == key and isinstance(value_node, yaml.ScalarNode):
            return value_node.value.strip()
    return ""


def _check_nesting(text: str) -> None:
    """Refuse brackets nested deeper than MAX_NESTING before any parser recurses into them
    (a 64 KiB run of `[` would otherwise cost a deep recursion)."""
    depth = 0
    for line_no, line in enumerate(text.split("\n"), 1):
        for char in line:
            if char in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    raise FrontmatterError(f"brackets nest more than {MAX_NESTING} deep", line_no)
            elif char in "]}":
                depth = max(depth - 1, 0)


def repair(text: str) -> tuple[str, list[str]]:
    """`text` with the two known mistakes repaired, and a note per repair made."""
    lines, repairs = text.split("\n"), []
    moved = _dedent_after_first_key(lines)
    if moved:
        repairs.append("keys indented under the first key were moved to the top level: "
                       + ", ".join(moved[:10]))
    quoted = _quote_colon_values(lines)
    if quoted:
        repairs.append("values containing ': ' were quoted: " + ", ".join(quoted[:10]))
    return "\n".join(lines), repairs


def _key_of(line: str) -> str | None:
    """The key of a `key: value` (or `key:`) line at column 0, else None."""
    key, colon, _ = line.partition(":")
    if not colon or not key or key != key.strip() or key.startswith(("-", "#", "?")):
        return None
    if not all(c.isalnum() or c in "_-." for c in key):
        return None
    rest = line[len(key) + 1:]
    return key if rest == "" or rest[0] in " \t" else None


def _first_content(lines: list[str], start: int = 0) -> int | None:
    for index in range(start, len(lines)):
        stripped = lines[index].strip()
        if stripped and not stripped.startswith("#"):
            return index
    return None


def _dedent_after_first_key(lines: list[str]) -> list[str]:
    """Move keys indented under a first key that has a plain value back to column 0."""
    first = _first_content(lines)
    if first is None or _key_of(lines[first]) is None:
        return []
    value = lines[first].partition(":")[2].strip()
    if not value or value.startswith(NOT_PLAIN):
        return []  # `key:` with an indented block is a real nested mapping
    nxt = _first_content(lines, first + 1)
    if nxt is None:
        return []
    indent = len(lines[nxt]) - len(lines[nxt].lstrip(" "))
    if indent == 0 or _key_of(lines[nxt][indent:]) is None:
        return []
    moved = []
    for index in range(nxt, len(lines)):
        line = lines[index]
        if line.strip() and not line.startswith(" "):
            break  # back at the top level: the mistake ends here
        if line[:indent].strip() == "":
            lines[index] = line[indent:]
            key = _key_of(lines[index])
            if key is not None:
                moved.append(key)
    return moved


def _quote_colon_values(lines: list[str]) -> list[str]:
    """Quote top-level plain values that contain `: ` (with their continuation lines)."""
    out, quoted, index = [], [], 0
    while index < len(lines):
        line = lines[index]
        key = _key_of(line)
        value = line[len(key) + 1:].strip() if key else ""
        index += 1
        if not (key and value and not value.startswith(NOT_PLAIN)
                and (": " in value or value.endswith(":"))):
            out.append(line)
            continue
        parts = [_without_comment(value)]
        while index < len(lines) and lines[index].startswith((" ", "\t")) and \
                lines[index].strip() and not lines[index].lstrip().startswith("#"):
            parts.append(lines[index].strip())
            index += 1
        out.append(f"{key}: {json.dumps(' '.join(parts), ensure_ascii=False)}")
        quoted.append(key)
    lines[:] = out
    return quoted


def _without_comment(value: str) -> str:
    """A plain value without its trailing ` # comment` (YAML would drop it too)."""
    at = value.find(" #")
    return value[:at].rstrip() if at >= 0 else value
