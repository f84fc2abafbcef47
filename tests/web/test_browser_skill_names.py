"""Skills named as people name them, in headless Chromium: a Chinese-named bundle and a
`Word / DOCX` one are uploaded from the page; their cards show the display name and the
slug, the repaired frontmatter's note, and the file browser shows both names and the note.
Screenshots at 1440x900 and 390x844 (no horizontal scroll)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fakes import skill_registry
from tests.fakes.skill_archives import PNG, make_zip
from tests.web.test_browser import SHOTS, sign_in
from tests.web.test_browser_skills import workspace  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("private_endpoints")]
bundle_dir = skill_registry.bundle_dir  # fixture
CORPUS = Path(__file__).resolve().parents[1] / "data" / "skills_corpus"
SIZES = {"desktop": (1440, 900), "mobile": (390, 844)}

WORD = make_zip({"word-docx/SKILL.md": (
    b"---\nname: Word / DOCX\n  description: Use when: the user sends a .docx file, or asks "
    b"for a Word report with tables and tracked changes.\n  version: 1.2.0\n---\n"
    b"# Word documents\n\nRun `python scripts/docx_tool.py`.\n"),
    "word-docx/scripts/docx_tool.py": b"print('docx')\n", "word-docx/assets/icon.png": PNG})


def zipped(folder: Path) -> bytes:
    files = {f"{folder.name}/{p.relative_to(folder).as_posix()}": p.read_bytes()
             for p in sorted(folder.rglob("*")) if p.is_file()}
    return make_zip(files)


def add(tab, path: Path) -> None:
    tab.get_by_role("link", name="Add skill").first.click()
    drawer = tab.locator(".drawer")
    drawer.get_by_label("ZIP file").set_input_files(str(path))
    drawer.get_by_role("button", name="Add skill").click()


@pytest.mark.parametrize("size", SIZES)
def test_display_names_slugs_and_notes_are_shown(chromium, live_server, workspace,  # noqa: F811
                                                 tmp_path, size):
    width, height = SIZES[size]
    context = chromium.new_context(viewport={"width": width, "height": height},
                                   base_url=live_server)
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    try:
        (tmp_path / "word.zip").write_bytes(WORD)
        (tmp_path / "analyzer.zip").write_bytes(zipped(CORPUS / "weknora__document-analyzer"))
        sign_in(tab, workspace.admin.email)
        tab.goto("/skills")
        add(tab, tmp_path / "word.zip")
        tab.locator(".flash-text", has_text="Word / DOCX").wait_for()
        tab.goto("/skills")
        add(tab, tmp_path / "analyzer.zip")
        tab.locator(".flash-text", has_text="文档分析器").wait_for()
        tab.goto("/skills")

        word = tab.locator(".skill-card", has_text="Word / DOCX")
        assert word.locator(".skill-name").inner_text() == "Word / DOCX"
        assert word.locator(".skill-slug").inner_text() == "word-docx"
        word.locator(".skill-notes summary").click()
        assert "values containing ': ' were quoted: description" in word.inner_text()
        assert "moved to the top level: description, version" in word.inner_text()
        assert "v1.2.0" in word.inner_text()
        chinese = tab.locator(".skill-card", has_text="文档分析器")
        assert chinese.locator(".skill-name").inner_text() == "文档分析器"
        assert re.fullmatch(r"skill-[0-9a-f]{8}", chinese.locator(".skill-slug").inner_text())
        assert tab.evaluate("document.documentElement.scrollWidth") <= width
        tab.mouse.move(0, 0)
        tab.screenshot(path=str(SHOTS / f"skill-names-{size}.png"), full_page=True)

        word.get_by_role("link", name="Files").click()
        tab.wait_for_url(re.compile(r"/skills/[0-9a-f-]+/files$"))
        assert tab.locator("h1").inner_text().startswith("Word / DOCX")
        assert tab.locator(".skill-slug-line").inner_text() == "Identifier word-docx"
        assert "values containing ': ' were quoted" in tab.locator(".skill-notes").inner_text()
        tab.locator("#file-viewer").get_by_text("Word documents").wait_for()
        assert tab.evaluate("document.documentElement.scrollWidth") <= width
        tab.screenshot(path=str(SHOTS / f"skill-names-files-{size}.png"), full_page=True)
    finally:
        context.close()
