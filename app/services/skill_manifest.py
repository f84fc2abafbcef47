"""SKILL.md: YAML frontmatter (name, description, version) and the instructions body.

The frontmatter is parsed with PyYAML's safe loader (no tags, no Python objects) and is
size-capped before parsing. The version, when present, must look like semver (reference
6.2: `^v?\\d+\\.\\d+(\\.\\d+)?([.-][0-9A-Za-z.-]+)?$`), read from its literal text so that
`version: 1.10` is not silently the float 1.1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from app.errors import BadRequest

FRONTMATTER_MAX = 64 * 1024
DESCRIPTION_MAX = 4096
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SEMVER = re.compile(r"^v?\d+\.\d+(\.\d+)?([.-][0-9A-Za-z.-]+)?$")


class BundleInvalid(BadRequest):
    """Reference 6.4 `ErrSkillBundleInvalid`: a 400 whose message says what to fix."""

    code = "skill_bundle_invalid"


def invalid(message: str) -> BundleInvalid:
    return BundleInvalid(f"The skill bundle is invalid: {message}")


@dataclass(frozen=True)
class SkillMeta:
    name: str
    description: str
    version: str
    instructions: str


def is_semver(value: str) -> bool:
    return bool(SEMVER.match(value))


def parse_skill_md(raw: bytes) -> SkillMeta:
    """The skill's metadata, or BundleInvalid naming what is wrong with SKILL.md."""
    if b"\x00" in raw:
        raise invalid("SKILL.md holds a NUL byte")
    try:
        text = raw.decode("utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError:
        raise invalid("SKILL.md is not UTF-8 text") from None
    frontmatter, body = _split(text)
    try:
        data = yaml.safe_load(frontmatter)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        raise invalid(f"the SKILL.md frontmatter is not valid YAML{line}") from None
    if not isinstance(data, dict):
        raise invalid("the SKILL.md frontmatter must be a mapping of keys to values")
    return SkillMeta(_name(data), _description(data), _version(data, frontmatter),
                     body.strip("\n"))


def _split(text: str) -> tuple[str, str]:
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip()), None)
    if start is None or lines[start].strip() != "---":
        raise invalid("SKILL.md must start with YAML frontmatter between --- lines "
                      "(name, description, version)")
    for end in range(start + 1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            frontmatter = "\n".join(lines[start + 1:end])
            if len(frontmatter) > FRONTMATTER_MAX:
                raise invalid("the SKILL.md frontmatter is larger than 64 KiB")
            return frontmatter, "\n".join(lines[end + 1:])
    raise invalid("the SKILL.md frontmatter is not closed by a --- line")


def _name(data: dict) -> str:
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise invalid("the SKILL.md frontmatter needs a name")
    name = name.strip()
    if not NAME.match(name):
        raise invalid(f"the skill name {name[:80]!r} must be 1-64 letters, digits, '.', '_' "
                      "or '-', starting with a letter or digit")
    return name


def _description(data: dict) -> str:
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise invalid("the SKILL.md frontmatter needs a description")
    if len(description) > DESCRIPTION_MAX:
        raise invalid(f"the description is longer than {DESCRIPTION_MAX} characters")
    return description.strip()


def _version(data: dict, frontmatter: str) -> str:
    value = data.get("version")
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise invalid("the version must be text like 1.2.3")
    text = value.strip() if isinstance(value, str) else _literal(frontmatter, "version")
    if not text:
        return ""
    if len(text) > 64 or not is_semver(text):
        raise invalid(f"the version {text[:64]!r} is not semver (like 1.2.3)")
    return text


def _literal(frontmatter: str, key: str) -> str:
    """A top-level scalar's text exactly as written (YAML would turn 1.10 into 1.1)."""
    node = yaml.compose(frontmatter, Loader=yaml.SafeLoader)
    for key_node, value_node in getattr(node, "value", []):
        if getattr(key_node, "value", None) == key and isinstance(value_node, yaml.ScalarNode):
            return value_node.value.strip()
    return ""
