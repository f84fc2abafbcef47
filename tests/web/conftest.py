"""Shared by the Playwright journeys: the `browser` marker, one Chromium per run, and a
fresh tab per test against the live server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("SANDLOT_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives the UI in headless Chromium against the live server",
    )


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    """Debian's Chromium through Playwright (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        message = f"no Chromium at {CHROMIUM} (apt-get install chromium, or set SANDLOT_CHROMIUM)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def tab(chromium, live_server, request):
    """A 1280x800 tab that accepts hx-confirm dialogs; a module may set TAB_TIMEOUT_MS."""
    context = chromium.new_context(viewport={"width": 1280, "height": 800}, base_url=live_server)
    page = context.new_page()
    page.set_default_timeout(getattr(request.module, "TAB_TIMEOUT_MS", 10_000))
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()
