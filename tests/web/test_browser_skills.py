"""The Skills section in headless Chromium against the live server: an admin uploads a ZIP
(the progress bar follows the upload), installs it, sees the card and browses its files;
screenshots of the catalog and of the file browser."""

from __future__ import annotations

import io
import os
import re
import zipfile

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import InstalledSkill, InstallStatus
from app.services import audit
from app.services.sandboxes import configs
from app.services.skills import catalog as service
from tests import factories
from tests.fakes import skill_registry
from tests.fakes.skill_archives import PNG, make_zip, skill_md
from tests.web._support import confirm
from tests.web.test_browser import SHOTS, shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("private_endpoints")]
bundle_dir = skill_registry.bundle_dir  # fixture
SYSTEM = audit.SystemActor("tests")

RUN_PY = b'''"""Profile a CSV file: column types, missing values, a summary table."""
import sys

import pandas as pd


def main(path: str) -> None:
    frame = pd.read_csv(path)
    print(frame.describe(include="all").to_markdown())


if __name__ == "__main__":
    main(sys.argv[1])
'''
SKILL_BODY = """# CSV analyst

Load a CSV or Excel file, profile its columns and chart what matters.

## When to use

- The user attaches a `.csv`, `.tsv` or `.xlsx` file.
- The user asks for a summary, a chart or a cleaned copy of tabular data.

## How

1. Run `python scripts/profile.py <file>` to see column types and missing values.
2. Answer with a short table; attach charts from `scripts/chart.py` when asked.
"""


TAB_TIMEOUT_MS = 15_000  # read by the shared `tab` fixture


@pytest.fixture
def workspace(bundle_dir) -> factories.TenantUsers:
    """A workspace with a config per backend (remote ones on loopback: nothing leaves)."""
    group = factories.populate("Acme Research")
    configs.create_config(group.tenant, SYSTEM, "Local Docker", "",
                          factories.config_doc("docker"))
    configs.create_config(group.tenant, SYSTEM, "E2B production", "", factories.config_doc(
        "e2b", {"api_key": "e2b_canary_not_shown", "api_url": "http://127.0.0.1:3000",
                "template_id": "python-3.12"}))
    configs.create_config(group.tenant, SYSTEM, "Cube cluster", "", factories.config_doc(
        "cube", {"api_url": "http://127.0.0.1:8443", "proxy_url": "http://127.0.0.1:8444",
                 "sandbox_domain": "sandbox.cube.internal", "template_id": "cube-desktop-2"}))
    return group


def bundle(name: str, version: str, description: str, extra: dict | None = None) -> bytes:
    files = {"SKILL.md": skill_md(name, description, version, SKILL_BODY),
             "scripts/profile.py": RUN_PY, "assets/logo.png": PNG, **(extra or {})}
    return make_zip(files, compression=zipfile.ZIP_STORED)


def register(group, name: str, version: str, description: str, categories=()):
    entry = service.register_upload(group.tenant, SYSTEM,
                                    io.BytesIO(bundle(name, version, description)))
    if categories:
        service.set_categories(group.tenant, SYSTEM, entry, list(categories))
    return entry


def config_id(group, name: str) -> str:
    return next(c.id for c in configs.list_configs(group.tenant) if c.name == name)


def test_admin_uploads_a_zip_installs_it_and_browses_its_files(tab, workspace, tmp_path):
    # Incompressible filler, so the upload takes long enough to report its progress.
    archive = tmp_path / "csv-analyst.zip"
    archive.write_bytes(bundle("csv-analyst", "2.1.0", "Profile CSV and Excel files with "
                               "pandas and chart the results.",
                               {"assets/sample.bin": os.urandom(6 * 1024 * 1024)}))
    sign_in(tab, workspace.admin.email)
    tab.get_by_role("link", name="Skills", exact=True).click()
    tab.wait_for_url(re.compile(r"/skills$"))
    tab.get_by_text("No skills yet").wait_for()
    tab.get_by_role("link", name="Add skill").click()
    drawer = tab.locator(".drawer")
    drawer.get_by_label("ZIP file").set_input_files(str(archive))
    drawer.get_by_label("Local Docker").check()
    drawer.get_by_label("E2B production").check()
    tab.evaluate("""() => {
        window.seen = [];
        document.addEventListener("htmx:xhr:progress", () => {
            const bar = document.querySelector("[data-upload-progress] progress");
            if (bar) window.seen.push([Number(bar.value), bar.closest("[hidden]") === null]);
        });
    }""")
    cdp = tab.context.new_cdp_session(tab)  # a slow uplink: the bar must move, not jump
    cdp.send("Network.enable")
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 20, "downloadThroughput": -1,
        "uploadThroughput": 4 * 1024 * 1024})
    drawer.get_by_role("button", name="Add skill").click()
    drawer.locator(".upload-progress:not([hidden])").wait_for()
    tab.get_by_text("Installing “csv-analyst”").wait_for(timeout=30_000)
    cdp.send("Network.emulateNetworkConditions", {
        "offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1})
    seen = tab.evaluate("window.seen")
    assert seen and all(shown for _, shown in seen)
    values = [value for value, _ in seen]
    assert values == sorted(values) and values[-1] == 100
    assert any(0 < value < 100 for value in values), values

    result = tab.locator("#install-result")
    assert result.locator(".result-row.is-accepted").count() == 2
    assert "2 of 2 installs accepted." in tab.locator(".drawer-head").inner_text()
    tab.locator(".flash-text", has_text="Added “csv-analyst” 2.1.0.").wait_for()
    tab.get_by_role("link", name="Done").click()
    assert tab.locator(".drawer").count() == 0
    card = tab.locator(".skill-card", has_text="csv-analyst")
    # the truth: no install job runs yet
    assert card.locator(".chip .status-installing").count() == 2
    assert "v2.1.0" in card.inner_text()

    card.get_by_role("link", name="Files").click()
    tab.wait_for_url(re.compile(r"/skills/[0-9a-f-]+/files$"))
    viewer = tab.locator("#file-viewer")
    viewer.get_by_text("Load a CSV or Excel file").wait_for()
    tab.locator(".tree-file", has_text="logo.png").click()
    viewer.locator("img[src^='data:image/png;base64,']").wait_for()
    tab.wait_for_url(re.compile(r"path=assets%2Flogo.png|path=assets/logo.png"))
    tab.locator(".tree-file", has_text="sample.bin").click()
    viewer.get_by_text("Binary file, not shown.").wait_for()
    tab.locator(".tree-dir summary", has_text="assets").click()  # folders collapse
    assert not tab.locator(".tree-file", has_text="logo.png").is_visible()
    tab.locator(".tree-dir summary", has_text="assets").click()
    tab.locator(".tree-file", has_text="profile.py").click()
    viewer.get_by_text("def main(path: str) -> None:").wait_for()
    assert tab.locator(".tree-file[aria-current='true']").inner_text().startswith("profile.py")
    tab.locator(".tree-file", has_text="SKILL.md").click()
    viewer.get_by_text("## When to use").wait_for()
    tab.mouse.move(0, 0)
    shot(tab, "skill-files.png")


@pytest.mark.console_errors("status of 400", "Error Code 400")  # forms refused on purpose
def test_the_catalog_shows_each_install_status(tab, workspace, app, monkeypatch):
    """Statuses are set on the rows directly, to show the whole palette at once (six
    installs are accepted at once, past the default of three running per workspace)."""
    monkeypatch.setitem(app.config, "QUOTA_CONCURRENT_INSTALLS_PER_WORKSPACE", 6)
    group = workspace
    pdf = register(group, "pdf-tools", "1.4.0", "Extract text and tables from PDFs, fill "
                   "forms and merge documents.", ["Documents"])
    web = register(group, "web-research", "0.9.2", "Search the web, fetch pages and summarise "
                   "the sources with citations.", ["Research", "Web"])
    csv = register(group, "csv-analyst", "2.1.0", "Profile CSV and Excel files with pandas "
                   "and chart the results.", ["Data"])
    register(group, "git-helper", "1.0.0", "Clone repositories, review diffs and write "
             "conventional commit messages.", ["Development"])
    docker, e2b, cube = (config_id(group, n) for n in ("Local Docker", "E2B production",
                                                       "Cube cluster"))
    service.install(group.tenant, SYSTEM, pdf, [docker, e2b])
    service.install(group.tenant, SYSTEM, web, [docker, e2b])
    service.install(group.tenant, SYSTEM, csv, [docker, cube])
    states = {
        ("pdf-tools", docker): (InstallStatus.ready, None),
        ("pdf-tools", e2b): (InstallStatus.ready, None),
        ("web-research", docker): (InstallStatus.failed,
                                   "pip install failed: pypi.org is not allowed by the "
                                   "network policy of this config."),
        ("web-research", e2b): (InstallStatus.installing, None),
        ("csv-analyst", docker): (InstallStatus.ready, None),
        ("csv-analyst", cube): (InstallStatus.removing, None),
    }
    for row in db.session.scalars(select(InstalledSkill)):
        row.status, row.error = states[(row.name, row.sandbox_config_id)]
    db.session.commit()

    sign_in(tab, group.admin.email)
    tab.goto("/skills")
    for status in ("installing", "ready", "failed", "removing"):
        assert tab.locator(f".chip .status-{status}").count() >= 1, status
    web_card = tab.locator(".skill-card", has_text="web-research")
    assert "pypi.org is not allowed" in web_card.locator(".skill-failure").inner_text()
    delete = web_card.get_by_role("button", name="Delete")
    assert delete.is_disabled()
    assert "remove it from each" in web_card.locator(".disabled-why").get_attribute("title")
    git_card = tab.locator(".skill-card", has_text="git-helper")
    assert git_card.get_by_role("button", name="Delete").is_enabled()
    tab.mouse.move(0, 0)
    tab.screenshot(path=str(SHOTS / "skills.png"), full_page=True)  # both rows of cards

    tab.locator(".tab", has_text="Research").click()
    tab.wait_for_url(re.compile(r"category=Research"))
    assert tab.locator(".skill-card").count() == 1

    tab.goto("/skills")
    web_card = tab.locator(".skill-card", has_text="web-research")
    web_card.get_by_role("link", name="Install", exact=True).click()
    tab.locator(".drawer").get_by_role("button", name="Install").click()
    tab.locator(".drawer").get_by_text("Pick at least one sandbox config.").wait_for()
    tab.locator(".drawer").get_by_role("link", name="Cancel").click()
    tab.get_by_role("link", name="Add skill").click()
    drawer = tab.locator(".drawer")
    drawer.get_by_label("Source").fill("acme/pdf-tools")
    drawer.get_by_label("Cube cluster").check()
    drawer.get_by_role("button", name="Add skill").click()
    drawer.locator("#skill-source-error").get_by_text("is ambiguous").wait_for()
    assert drawer.get_by_label("Source").input_value() == "acme/pdf-tools"
    assert drawer.get_by_label("Cube cluster").is_checked()  # the form keeps what was picked
    drawer.get_by_role("link", name="Cancel").click()
    tab.locator(".skill-card", has_text="git-helper").get_by_role("button",
                                                                   name="Delete").click()
    confirm(tab)
    tab.get_by_text("Deleted “git-helper” from the catalog.").wait_for()
    assert tab.locator(".skill-card", has_text="git-helper").count() == 0
