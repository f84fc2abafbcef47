"""Skill identifiers and names as published skills write them.

A skill has a display name (any script, spaces, punctuation: `Word / DOCX`, `文档助手`)
and an identifier (the slug: the catalog key, the install folder, what agents select). The
slug is an explicit `slug` from the frontmatter, or the name itself when it already is a
valid identifier, or derived from the name: lowercase ASCII words joined by `-`, with
`skill-<hash>` for a name with no ASCII letters. Too long an identifier is shortened to a
readable prefix plus a hash of the whole, so the same name always gives the same slug.

Entry names are also checked for mixed-script confusables (a Cyrillic `І` inside
`SKІLL.md`): such a name is flagged, and never matches `SKILL.md`, which is compared exactly.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

SLUG_MAX = 64
HASH_LEN = 8
SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ASCII_WORD = re.compile(r"[a-z0-9]+")
DISPLAY_MAX = 200

# Scripts whose letters pass for Latin ones; a word mixing two of them is a confusable.
LOOKALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC")
# Common non-Latin letters that render like Latin ones, for naming what a word imitates.
_SKELETON = str.maketrans({
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "Х": "X", "І": "I", "Ј": "J", "Ѕ": "S", "Ӏ": "I", "Ԛ": "Q",
    "Ԝ": "W", "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x",
    "і": "i", "ј": "j", "ѕ": "s", "һ": "h", "ԁ": "d", "ӏ": "l", "ԛ": "q", "ԝ": "w",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "ο": "o", "ν": "v",
})


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LEN]


def is_slug(value: str) -> bool:
    """Whether `value` is already a valid identifier (1-64 ASCII letters, digits, . _ -)."""
    return len(value) <= SLUG_MAX and bool(SLUG.match(value))


def shorten(value: str) -> str:
    """`value` cut to SLUG_MAX: a readable prefix (at a word break if there is one) and a
    hash of the whole value, so two long names that share a prefix stay distinct."""
    if len(value) <= SLUG_MAX:
        return value
    room = SLUG_MAX - HASH_LEN - 1
    prefix = value[:room]
    cut = max(prefix.rfind("-"), prefix.rfind("_"), prefix.rfind("."))
    if cut >= room // 2:
        prefix = prefix[:cut]
    return f"{prefix.rstrip('-_.')}-{short_hash(value)}"


def derive(name: str) -> str:
    """The identifier for a display name: the name itself when it is one, else its ASCII
    words (accents folded: `Café` -> `cafe`) joined by `-`, else `skill-<hash>`."""
    name = name.strip()
    if SLUG.match(name):
        return shorten(name)
    folded = unicodedata.normalize("NFKD", name)
    ascii_text = "".join(c for c in folded if not unicodedata.combining(c)).lower()
    words = ASCII_WORD.findall(ascii_text)
    if not any(c.isalpha() for word in words for c in word):
        return f"skill-{short_hash(name)}"
    return shorten("-".join(words))


def _script(char: str) -> str | None:
    if not char.isalpha():
        return None
    label = unicodedata.name(char, "").split(" ", 1)[0]
    if label in ("FULLWIDTH", "MATHEMATICAL"):
        return "LATIN-LIKE"  # styled Latin letters: only ever confusable beside plain Latin
    return label if label in LOOKALIKE_SCRIPTS else None


def mixed_script_words(text: str) -> list[str]:
    """The words of `text` (runs of letters) that mix lookalike scripts, such as `SKІLL`
    with a Cyrillic `І`. Words wholly in one script (`привет`, `readme`) are fine."""
    found, word, scripts = [], [], set()
    for char in f"{text} ":
        script = _script(char)
        if char.isalpha():
            word.append(char)
            if script:
                scripts.add(script)
            continue
        if len(scripts) > 1:
            found.append("".join(word))
        word, scripts = [], set()
    return found


def imitates(name: str, target: str) -> bool:
    """Whether `name` is not `target` but reads as it once lookalike letters are mapped."""
    if name == target:
        return False
    skeleton = unicodedata.normalize("NFKC", name).translate(_SKELETON)
    return skeleton == target


def confusable_warning(path: str) -> str | None:
    """A warning for an entry path that mixes lookalike scripts, or None."""
    base = path.rsplit("/", 1)[-1]
    if imitates(base, "SKILL.md"):
        return (f"The file {path[:120]!r} looks like SKILL.md but uses letters from another "
                "script; it is kept as an ordinary file and not read as the skill's SKILL.md.")
    words = mixed_script_words(path)
    if words:
        return (f"The file name {path[:120]!r} mixes letters of different scripts that look "
                f"alike ({', '.join(repr(w[:40]) for w in words[:3])}); check it is what it "
                "seems.")
    return None
