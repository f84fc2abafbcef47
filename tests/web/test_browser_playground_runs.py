"""Long commands in the Playground (issue 11 item 1), in headless Chromium against the
live server and the real Docker engine: a long command shows as running with its elapsed
time and a Stop button, its output arrives while it runs, the history (and the running
command) survive a reload, and Stop ends it. Screenshots at 1440x900 and 390x844:
docs/screenshots/playground-running*.png."""

from __future__ import annotations

import re
import time

import pytest

from app.extensions import db
from app.models import ExecRun, RunStatus
from tests.web.test_browser import shot, sign_in
from tests.web.test_browser_playground import workspace  # noqa: F401 - the fixture

pytestmark = pytest.mark.browser
TAB_TIMEOUT_MS = 20_000
LONG = "echo warming up; sleep 2; echo halfway; sleep 60; echo never"


def _open_session(tab, email: str) -> None:
    sign_in(tab, email)
    tab.goto("/playground")
    tab.locator(".session-row", has_text="Data prep").locator(".session-link").click()
    tab.wait_for_url(re.compile(r"/playground/[0-9a-f-]{36}$"))
    tab.locator("#session-pane").get_by_role("heading", name="Data prep").wait_for()


def _elapsed(entry) -> int:
    return int(entry.locator(".run-elapsed").inner_text().removesuffix(" s"))


def _run(tab, command: str):
    tab.get_by_label("Command").fill(command)
    tab.get_by_role("button", name="Run").click()
    entry = tab.locator("#transcript .run.is-running").last
    entry.wait_for()
    return entry


def _wait_all_ended(seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        db.session.expire_all()
        if not db.session.query(ExecRun).filter_by(status=RunStatus.running).count():
            return
        time.sleep(0.2)
    raise AssertionError("a run was still running at the end of the test")


def test_a_long_command_runs_streams_survives_a_reload_and_stops(tab, workspace, app,  # noqa: F811
                                                                  monkeypatch):
    monkeypatch.setitem(app.config, "RUN_SYNC_WAIT_SECONDS", 1.0)
    tab.set_viewport_size({"width": 1440, "height": 900})
    _open_session(tab, workspace.contributor.email)
    try:
        entry = _run(tab, LONG)
        assert entry.locator(".run-cmd").inner_text() == LONG
        entry.get_by_role("button", name="Stop").wait_for()
        entry.locator(".run-out", has_text="halfway").wait_for()  # output while it runs
        assert "Running" in entry.locator(".run-live").inner_text()
        first = _elapsed(entry)
        tab.wait_for_timeout(2100)
        assert _elapsed(entry) >= first + 2  # the elapsed time moves
        tab.mouse.move(0, 0)
        shot(tab, "playground-running.png")

        tab.reload()  # the history, and the command still running, come back
        entry = tab.locator("#transcript .run.is-running")
        entry.wait_for()
        assert entry.locator(".run-out").inner_text() == "warming up\nhalfway"
        assert _elapsed(entry) >= 4
        entry.get_by_role("button", name="Stop").click()
        stopped = tab.locator("#transcript .run[data-status=cancelled]")
        stopped.wait_for()
        assert "Stopped" in stopped.locator(".run-status").inner_text()
        assert stopped.locator(".run-out").inner_text() == "warming up\nhalfway"

        tab.set_viewport_size({"width": 390, "height": 844})
        phone = _run(tab, "echo on the phone; sleep 30")
        phone.locator(".run-out", has_text="on the phone").wait_for()
        assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), \
            "the page scrolls sideways"
        phone.scroll_into_view_if_needed()
        shot(tab, "playground-running-mobile.png")
        phone.get_by_role("button", name="Stop").click()
        tab.locator("#transcript .run[data-status=cancelled]").nth(1).wait_for()
        tab.reload()
        assert tab.locator("#transcript .run.run-stored").count() == 2
    finally:
        _wait_all_ended()


def test_a_run_whose_server_stopped_shows_as_lost(tab, workspace, app, monkeypatch):  # noqa: F811
    """Its process stops refreshing it (here: it forgets the run, as a dead one would): the
    polled entry turns into "Lost", saying what that means. Screenshots:
    docs/screenshots/playground-run-lost*.png."""
    from app.services.sessions import runs

    monkeypatch.setitem(app.config, "RUN_SYNC_WAIT_SECONDS", 1.0)
    monkeypatch.setitem(app.config, "RUN_HEARTBEAT_SECONDS", 0.3)
    monkeypatch.setitem(app.config, "RUN_LOST_SECONDS", 2)
    monkeypatch.delitem(app.extensions, "exec_run_heartbeats", raising=False)
    tab.set_viewport_size({"width": 1440, "height": 900})
    _open_session(tab, workspace.contributor.email)
    try:
        entry = _run(tab, "echo started; sleep 10")
        entry.locator(".run-out", has_text="started").wait_for()
        run_id = entry.get_attribute("id").removeprefix("run-")
        runs._heartbeats(app).discard(run_id)
        lost = tab.locator(f"#run-{run_id}[data-status=lost]")
        lost.wait_for(timeout=TAB_TIMEOUT_MS)
        assert lost.locator(".run-status").inner_text() == "Lost"
        assert lost.get_by_role("alert").inner_text() == runs.LOST
        assert lost.locator(".run-out").inner_text() == "started"
        assert not lost.get_by_role("button", name="Stop").count()
        tab.mouse.move(0, 0)
        shot(tab, "playground-run-lost.png")
        tab.set_viewport_size({"width": 390, "height": 844})
        lost.scroll_into_view_if_needed()
        assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), \
            "the page scrolls sideways"
        shot(tab, "playground-run-lost-mobile.png")
    finally:
        app.extensions.pop("exec_run_heartbeats", None)
        assert runs.drain(app, 20) == []
