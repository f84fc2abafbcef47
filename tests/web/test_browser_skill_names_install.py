"""Issue 14's done-when in Chromium against the live server and the real Docker engine: a
bundle named in Chinese and one named `Word / DOCX` are uploaded from the Skills page with
a config ticked, and both installs reach Ready on that config (the real install job, a
real image commit), shown on their cards under their display names."""

from __future__ import annotations

import pytest

from app.services import audit
from app.services.sandboxes import configs
from tests import factories
from tests.fakes import skill_registry
from tests.installs.conftest import (
    _cleanup,
    _wait_jobs,
    engine,  # noqa: F401 (fixture)
)
from tests.web.test_browser import sign_in
from tests.web.test_browser_skill_names import CORPUS, WORD, zipped

pytestmark = [pytest.mark.browser]
bundle_dir = skill_registry.bundle_dir  # fixture
SYSTEM = audit.SystemActor("tests")
TAB_TIMEOUT_MS = 20_000


@pytest.fixture
def workspace(bundle_dir, engine):  # noqa: F811 (fixture)
    group = factories.populate("Acme Research")
    configs.create_config(group.tenant, SYSTEM, "Local Docker", "",
                          factories.config_doc("docker", {"network_mode": "none"}))
    yield group
    _wait_jobs()
    _cleanup(engine)


def test_skills_named_in_chinese_and_word_docx_install_from_the_page(tab, workspace, tmp_path):
    (tmp_path / "word.zip").write_bytes(WORD)
    (tmp_path / "analyzer.zip").write_bytes(zipped(CORPUS / "weknora__document-analyzer"))
    sign_in(tab, workspace.admin.email)
    for archive, name in (("analyzer.zip", "文档分析器"), ("word.zip", "Word / DOCX")):
        tab.goto("/skills")
        tab.get_by_role("link", name="Add skill").first.click()
        drawer = tab.locator(".drawer")
        drawer.get_by_label("ZIP file").set_input_files(str(tmp_path / archive))
        drawer.get_by_label("Local Docker").check()  # install it there on upload
        drawer.get_by_role("button", name="Add skill").click()
        tab.locator(".flash-text", has_text=name).wait_for()

    tab.goto("/skills")
    for name in ("文档分析器", "Word / DOCX"):
        card = tab.locator(".skill-card", has_text=name)
        assert card.locator(".skill-name").inner_text() == name
        chip = card.locator(".chip", has_text="Local Docker")
        chip.locator(".status-ready").wait_for(timeout=180_000)
