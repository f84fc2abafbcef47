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
    config.addinivalue_line(
        "markers", "console_errors(*fragments): console errors this test provokes on purpose "
                   "(each must contain one of the fragments); any other fails it",
    )


# What the pages of the current test logged as errors: console.error (htmx logs every
# failed request and swap there), CSP violations and uncaught exceptions, from every tab
# of every context, on page load and after each htmx swap alike.
CONSOLE_ERRORS: list[str] = []


def _steady(page):
    """A page whose navigation is tried once more when Chromium reports the network
    changed under it: this machine's Docker engine adds and removes bridges while other
    tests' sandboxes come and go, and Chromium then aborts a load on loopback with
    ERR_NETWORK_CHANGED, which says nothing about the page."""
    goto = page.goto

    def retrying(url, **kwargs):
        try:
            return goto(url, **kwargs)
        except Exception as exc:  # noqa: BLE001 - Playwright's Error, matched by its text
            if "ERR_NETWORK_CHANGED" not in str(exc):
                raise
            return goto(url, **kwargs)

    page.goto = retrying
    return page


class _Context:
    """A browser context whose new pages are steady (the rest is the context's own)."""

    def __init__(self, context):
        self._context = context

    def new_page(self, *args, **kwargs):
        return _steady(self._context.new_page(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._context, name)


class _Guarded:
    """The browser, with every new context's errors recorded in CONSOLE_ERRORS."""

    def __init__(self, browser):
        self._browser = browser

    def new_context(self, **kwargs):
        context = self._browser.new_context(**kwargs)
        context.on("console", lambda message: CONSOLE_ERRORS.append(
            f"{message.text} (at {message.page.url if message.page else '?'})")
            if message.type == "error" else None)
        context.on("weberror", lambda error: CONSOLE_ERRORS.append(f"uncaught: {error.error}"))
        return _Context(context)

    def __getattr__(self, name):
        return getattr(self._browser, name)


@pytest.fixture(autouse=True)
def console_guard(request):
    """Fails a browser test whose pages logged an error it did not expect."""
    CONSOLE_ERRORS.clear()
    yield
    if "chromium" not in request.fixturenames:
        return
    marker = request.node.get_closest_marker("console_errors")
    expected = marker.args if marker else ()
    unexpected = [e for e in CONSOLE_ERRORS if not any(f in e for f in expected)]
    CONSOLE_ERRORS.clear()
    if unexpected:
        pytest.fail("the pages logged errors:\n  " + "\n  ".join(unexpected[:20]),
                    pytrace=False)


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
        yield _Guarded(browser)
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


@pytest.fixture
def docker_sessions(app):
    """A member's two sessions on a local Docker config (no network): "Data work", whose
    sandbox runs, and "Not started", which has none yet. Both sandboxes go at the end."""
    from app.services import audit
    from app.services.sandboxes import configs
    from app.services.sessions import lifecycle as sessions
    from tests import factories
    from tests.backends.conftest import BASE_IMAGE, require_docker

    require_docker()
    group = factories.populate("Acme Research")
    config = configs.create_config(group.tenant, audit.SystemActor("tests"), "Local Docker",
                                   "", factories.config_doc("docker", {
                                       "image": BASE_IMAGE, "network_mode": "none"}))
    session = sessions.create_session(group.tenant, group.contributor, config.id, "Data work")
    assert sessions.exec_command(group.tenant, group.contributor, session, "true").exit_code == 0
    fresh = sessions.create_session(group.tenant, group.contributor, config.id, "Not started")
    yield group, session, fresh
    sessions.destroy_sandboxes(session)
    sessions.destroy_sandboxes(fresh)
