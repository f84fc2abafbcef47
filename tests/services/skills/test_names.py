"""Issue 14 items 1-2: skill names and frontmatter as published skills write them, the
repairs the reference makes (with a note), linear time on hostile frontmatter, and
mixed-script confusables flagged, never taken as SKILL.md."""

from __future__ import annotations

import io
import time

import pytest

from app.services.skills.bundles import normalize
from app.services.skills.manifest import BundleInvalid, parse_skill_md
from app.services.skills.names import derive, short_hash
from tests.fakes.skill_archives import make_tar, make_zip, skill_files


def meta(frontmatter: str, body: str = "# Body\n"):
    return parse_skill_md(f"---\n{frontmatter}\n---\n{body}".encode())


def refused(frontmatter: str, match: str) -> str:
    with pytest.raises(BundleInvalid, match=match) as caught:
        meta(frontmatter)
    assert caught.value.status == 400 and caught.value.code == "skill_bundle_invalid"
    return caught.value.message


# ---------------------------------------------------------------- names and slugs

@pytest.mark.parametrize("name,slug", [
    ("Word / DOCX", "word-docx"),
    ("Café Crème: Recettes", "cafe-creme-recettes"),
    ("PDF 处理 tools", "pdf-tools"),
    ("demo-skill", "demo-skill"),  # already an identifier: kept as it is
    ("My_Skill.v2", "My_Skill.v2"),
])
def test_any_display_name_is_accepted_and_the_slug_is_derived(name, slug):
    result = meta(f"name: {name}\ndescription: d")
    assert result.display_name == name and result.name == slug


def test_a_name_with_no_ascii_letters_gets_a_stable_hash_slug():
    first = meta("name: 文档助手\ndescription: 处理 Word 文档")
    again = meta("name: 文档助手\ndescription: other")
    assert first.display_name == "文档助手"
    assert first.name == again.name == f"skill-{short_hash('文档助手')}"
    assert meta("name: 表格助手\ndescription: d").name != first.name


def test_an_explicit_slug_wins_over_the_name():
    result = meta("name: Word / DOCX\nslug: docx-tools\ndescription: d")
    assert (result.name, result.display_name) == ("docx-tools", "Word / DOCX")


def test_a_frontmatter_without_name_uses_slug_or_display_name():
    only_slug = meta("slug: weather\ndescription: d")
    assert (only_slug.name, only_slug.display_name) == ("weather", "weather")
    only_display = meta("displayName: Weather Report\ndescription: d")
    assert (only_display.name, only_display.display_name) == ("weather-report", "Weather Report")
    both = meta("displayName: 天气预报\nslug: weather-cn\ndescription: d")
    assert (both.name, both.display_name) == ("weather-cn", "天气预报")


def test_a_display_name_beside_a_slug_like_name_is_what_is_shown():
    result = meta("name: quark-scan\ndisplayName: 夸克扫描 Quark Scan\ndescription: d")
    assert (result.name, result.display_name) == ("quark-scan", "夸克扫描 Quark Scan")


def test_a_slug_derived_from_a_long_name_is_cut_at_a_word_break_stably():
    long_name = "A very long skill name " * 6
    result = meta(f"name: {long_name}\ndescription: d")
    assert len(result.name) <= 64 and result.name.startswith("a-very-long-skill-name-")
    words = result.name.rsplit("-", 1)[0].split("-")  # whole words, then the hash
    assert set(words) <= {"a", "very", "long", "skill", "name"}
    assert result.name == derive(long_name)
    other = meta(f"name: {long_name} two\ndescription: d")
    assert other.name != result.name and len(other.name) <= 64


def test_the_references_limits_an_explicit_slug_of_64_and_a_description_of_1024():
    """Decisions 13: refused over the reference's limits (an explicit slug was shortened
    and a 4096-character description accepted); the display name stays free."""
    assert meta(f"slug: {'x' * 64}\nname: n\ndescription: d").name == "x" * 64
    refused(f"slug: {'x' * 65}\nname: n\ndescription: d", "slug is longer than 64")
    assert len(meta(f"name: n\ndescription: {'d' * 1024}").description) == 1024
    refused(f"name: n\ndescription: {'d' * 1025}", "longer than 1024 characters")


def test_angle_brackets_and_product_words_that_published_skills_use_are_accepted():
    """Where the reference refuses them (decisions 13, docs/deviations.md)."""
    result = meta("name: Claude API helper\ndescription: Builds <tool> calls for Anthropic")
    assert (result.name, result.description) == ("claude-api-helper",
                                                 "Builds <tool> calls for Anthropic")


def test_a_too_long_display_name_is_cut_short_with_a_note():
    result = meta(f"displayName: {'Long name ' * 30}\nname: long\ndescription: d")
    assert result.name == "long" and len(result.display_name) == 200
    assert result.display_name.endswith("…") and "shown cut short" in result.notes[0]


@pytest.mark.parametrize("frontmatter,match", [
    ("slug: ../../etc\ndescription: d", "the slug '../../etc' must be ASCII"),
    ("name: evil\u202egnp.sh\ndescription: d", "control or bidirectional"),
    ("description: d", "needs a name"),
])
def test_names_that_cannot_be_used_are_refused(frontmatter, match):
    refused(frontmatter, match)


def test_a_path_like_name_only_ever_gives_a_safe_slug():
    result = meta("name: ../../etc\ndescription: d")
    assert (result.name, result.display_name) == ("etc", "../../etc")


# ---------------------------------------------------------------- repairs

def test_an_unquoted_value_with_colon_space_is_quoted_and_noted():
    result = meta("name: pdf\ndescription: Use when: the user asks for a PDF\nversion: 1.0.0")
    assert result.description == "Use when: the user asks for a PDF"
    assert result.version == "1.0.0"
    assert result.notes == ("SKILL.md frontmatter repaired: values containing ': ' were "
                            "quoted: description",)


def test_a_quoted_value_keeps_its_continuation_lines():
    result = meta("name: pdf\ndescription: Triggers: pdf, forms\n  and tables # note\n"
                  "version: 1.2.0")
    assert result.description == "Triggers: pdf, forms and tables # note"


def test_keys_indented_under_the_first_key_are_moved_back_and_noted():
    result = meta("name: pdf-tools\n  description: Fill PDF forms\n  version: 1.10")
    assert (result.name, result.description, result.version) == (
        "pdf-tools", "Fill PDF forms", "1.10")
    assert result.notes == ("SKILL.md frontmatter repaired: keys indented under the first key "
                            "were moved to the top level: description, version",)


def test_both_repairs_together():
    result = meta("name: docx\n  description: Use for: Word files\n  license: MIT")
    assert result.description == "Use for: Word files" and len(result.notes) == 2


def test_valid_yaml_is_never_rewritten():
    result = meta("name: x\nmetadata:\n  author: me\ndescription: \"a: b\"")
    assert result.description == "a: b" and result.notes == ()


@pytest.mark.parametrize("frontmatter,line", [
    ("name: x\ndescription: d\nversion: [1, 2", 4),
    ("name: x\ndescription: \"unclosed\nversion: 1.0.0", 3),
])
def test_what_cannot_be_repaired_is_a_400_naming_the_line(frontmatter, line):
    message = refused(frontmatter, "not valid YAML")
    assert f"(line {line})" in message


def test_the_safe_loader_only():
    refused("name: x\ndescription: !!python/object/apply:os.system [id]", "not valid YAML")
    repaired = meta("name: x\ndescription: Use: !!python/object/apply:os.system [id]")
    assert repaired.description == "Use: !!python/object/apply:os.system [id]"  # only text


@pytest.mark.parametrize("frontmatter", [
    ":" * (64 * 1024 - 1),
    "description: " + "a: " * 21_000,
    "name: x\n" + "".join(" " * i + "k:\n" for i in range(1, 355)),
    "name: " + "[" * 65_000,
    "name: x\n  description: " + "a: " * 20_000,
    "name: x\n" + "a: b: c\n" * 8_000,
])
def test_hostile_frontmatter_is_answered_in_linear_time(frontmatter):
    assert len(frontmatter) <= 64 * 1024
    started = time.monotonic()
    try:
        meta(frontmatter)
    except BundleInvalid:
        pass
    # It takes milliseconds; a quadratic repair of 64 KiB would take minutes. The bound is
    # loose because another xdist worker may hold the CPU.
    assert time.monotonic() - started < 5.0


# ---------------------------------------------------------------- confusables

CYRILLIC_SKILL = "SK\u0406LL.md"  # a Cyrillic І (U+0406) where the I should be


def test_a_cyrillic_skill_md_is_never_the_skill_md():
    with pytest.raises(BundleInvalid, match="only looks like SKILL.md"):
        normalize(io.BytesIO(make_zip({CYRILLIC_SKILL: b"---\nname: evil\ndescription: d\n---\n"})),
                  kind="zip")


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_lookalike_beside_the_real_skill_md_is_kept_and_flagged(kind):
    files = {**skill_files(), CYRILLIC_SKILL: b"---\nname: evil\ndescription: d\n---\n"}
    data = make_zip(files) if kind == "zip" else make_tar(files)
    result = normalize(io.BytesIO(data), kind=kind)
    assert result.meta.name == "demo-skill"
    assert CYRILLIC_SKILL in [path for path, _ in result.files]
    assert len(result.notes) == 1 and "looks like SKILL.md" in result.notes[0]


def test_a_mixed_script_file_name_is_flagged_not_refused():
    files = {**skill_files(), "scripts/p\u0430yload.py": b"x",  # Cyrillic а inside Latin
             "docs/привет.md": b"x", "docs/说明.md": b"x"}
    result = normalize(io.BytesIO(make_zip(files)), kind="zip")
    assert len(result.notes) == 1 and "mixes letters of different scripts" in result.notes[0]
    assert "p\u0430yload" in result.notes[0]
