"""SKILL.md: YAML frontmatter (name, description, version) and the instructions body.

The frontmatter is parsed with PyYAML's safe loader (no tags, no Python objects) and is
size-capped before parsing; the mistakes the reference repairs are repaired first
(skill_frontmatter), with a note. The display name may be in any script; the identifier
(`name` of the catalog, the install folder) is an explicit `slug` (at most 64 characters)
or derived from the name (skill_names, cut at a word break); the description is at most
1024 characters, the reference's limits. The version, when present, must look like semver (reference
6.2: `^v?\\d+\\.\\d+(\\.\\d+)?([.-][0-9A-Za-z.-]+)?$`), read from its literal text so that
`version: 1.10` is not silently the float 1.1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.errors import BadRequest
from app.services.skills import frontmatter as skill_frontmatter
from app.services.skills import names as skill_names
from app.services.skills.frontmatter import FrontmatterError

FRONTMATTER_MAX = 64 * 1024
DESCRIPTION_MAX = 1024  # the reference's limit (decisions 13)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SEMVER = re.compile(r"^v?\d+\.\d+(\.\d+)?([.-][0-9A-Za-z.-]+)?$")


class BundleInvalid(BadRequest):
    """Reference 6.4 `ErrSkillBundleInvalid`: a 400 whose message says what to fix."""

    code = "skill_bundle_invalid"


def invalid(message: str) -> BundleInvalid:
    return BundleInvalid(f"The skill bundle is invalid: {message}")


@dataclass(frozen=True)
class SkillMeta:
    name: str  # the identifier (slug)
    description: str
    version: str
    instructions: str
    display_name: str = ""
    notes: tuple[str, ...] = ()  # what was repaired in the frontmatter


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
    frontmatter, body, offset = _split(text)
    try:
        parsed = skill_frontmatter.load(frontmatter)
    except FrontmatterError as exc:
        line = f" (line {exc.line + offset})" if exc.line is not None else ""
        raise invalid(f"the SKILL.md frontmatter is {exc.reason}{line}") from None
    data = parsed.data
    if not isinstance(data, dict):
        raise invalid("the SKILL.md frontmatter must be a mapping of keys to values")
    slug, display = _identity(data)
    notes = [f"SKILL.md frontmatter repaired: {r}" for r in parsed.repairs]
    if len(display) > skill_names.DISPLAY_MAX:
        notes.append(f"The skill's name is longer than {skill_names.DISPLAY_MAX} characters; "
                     "it is shown cut short.")
        display = display[:skill_names.DISPLAY_MAX - 1].rstrip() + "…"
    return SkillMeta(slug, _description(data), _version(data, frontmatter),
                     body.strip("\n"), display, tuple(notes))


def _split(text: str) -> tuple[str, str, int]:
    """Frontmatter, body, and the file line just before the frontmatter's first line."""
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
            return frontmatter, "\n".join(lines[end + 1:]), start + 1
    raise invalid("the SKILL.md frontmatter is not closed by a --- line")


def _text(data: dict, key: str) -> str:
    value = data.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return ""
    return " ".join(str(value).split())  # a folded or multi-line name reads as one line


def _identity(data: dict) -> tuple[str, str]:
    """(slug, display name). Shown: `displayName` (registries such as ClawHub write it
    beside a slug-like `name`), else `name`, else `slug`. The slug: an explicit `slug`,
    else derived from `name`, else from `displayName`."""
    explicit, name = _text(data, "slug"), _text(data, "name")
    display = _text(data, "displayName") or name or explicit
    if not display:
        raise invalid("the SKILL.md frontmatter needs a name")
    if CONTROL.search(display) or BIDI.search(display):
        raise invalid(f"the skill name {display[:80]!r} holds a control or bidirectional "
                      "character")
    if explicit:
        if not skill_names.SLUG.match(explicit):
            raise invalid(f"the slug {explicit[:80]!r} must be ASCII letters, digits, '.', "
                          "'_' or '-', starting with a letter or digit")
        if len(explicit) > skill_names.SLUG_MAX:
            raise invalid(f"the slug is longer than {skill_names.SLUG_MAX} characters")
        return explicit, display
    return skill_names.derive(name or display), display


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
    text = (value.strip() if isinstance(value, str)
            else skill_frontmatter.literal(frontmatter, "version"))
    if not text:
        return ""
    if len(text) > 64 or not is_semver(text):
        raise invalid(f"the version {text[:64]!r} is not semver (like 1.2.3)")
    return text
