"""The Playground keeps a live run in view and its header true (issue 27 item 6), in
headless Chromium against the live server and the real Docker engine, at 1440 and 390 px:
after a few commands have filled the transcript, a long command's newest output and its
Stop button stay in view while output arrives (unless the member scrolled up to read);
when it ends, the header's run count and "Last run" and the session's row follow without
a reload. Screenshots: docs/screenshots/playground-follow-{1440,390}.png."""

from __future__ import annotations

import pytest

from tests.web.test_browser import shot
from tests.web.test_browser_playground import workspace  # noqa: F401 - the fixture
from tests.web.test_browser_playground_runs import _open_session, _wait_all_ended

pytestmark = pytest.mark.browser
TAB_TIMEOUT_MS = 20_000
FILL = "seq 1 25"
# Output for about 8 s, then a short wait: the run outlives the request and is polled.
SLOW = "for i in $(seq 1 80); do echo line $i; sleep 0.1; done; sleep 1; echo done"

IN_BOX = """(el) => {
  const box = document.getElementById('transcript').getBoundingClientRect();
  const r = el.getBoundingClientRect();
  return r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
}"""
IN_VIEW = """(el) => {
  const box = document.getElementById('transcript').getBoundingClientRect();
  const r = el.getBoundingClientRect();
  return r.top >= box.top - 1 && r.bottom <= box.bottom + 1
      && r.top >= 0 && r.bottom <= window.innerHeight;
}"""


def _quick(tab, command: str, count: int) -> None:
    tab.get_by_label("Command").fill(command)
    tab.get_by_role("button", name="Run").click()
    tab.locator("#transcript .run").nth(count - 1).wait_for()
    tab.locator("#transcript .run.is-running").wait_for(state="detached")


@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_a_live_run_stays_in_view_and_the_header_follows_its_end(tab, workspace, app,  # noqa: F811
                                                                   monkeypatch, width, height):
    monkeypatch.setitem(app.config, "RUN_SYNC_WAIT_SECONDS", 1.0)
    tab.set_viewport_size({"width": width, "height": height})
    _open_session(tab, workspace.contributor.email)
    try:
        for n in (1, 2, 3):
            _quick(tab, FILL, n)
        binding = tab.locator("#session-binding")
        assert binding.locator(".binding-fact", has_text="Runs").locator("dd").inner_text() == "3"
        # The header and the row came out of band: their moments are the viewer's too.
        for moment in (binding.locator("time"), tab.locator(".session-row.is-selected time")):
            assert moment.get_attribute("data-localised") is not None

        tab.get_by_label("Command").fill(SLOW)
        tab.get_by_role("button", name="Run").click()
        entry = tab.locator("#transcript .run.is-running")
        entry.wait_for()
        entry.locator(".run-out", has_text="line 30").wait_for()
        tab.wait_for_timeout(1200)  # one more poll lands
        assert entry.get_by_role("button", name="Stop").evaluate(IN_VIEW), \
            "the Stop button of the live run is out of view"
        tab.mouse.move(0, 0)
        shot(tab, f"playground-follow-{width}.png")

        # A reload (or opening the session again) starts at the transcript's end, where the
        # live run is, not at its oldest command.
        tab.reload()
        entry = tab.locator("#transcript .run.is-running")
        entry.get_by_role("button", name="Stop").wait_for()
        assert entry.get_by_role("button", name="Stop").evaluate(IN_BOX), \
            "after a reload the live run is out of the transcript's view"
        with tab.expect_response(lambda r: r.request.headers.get("hx-request") == "true"
                                 and r.url.endswith(tab.url.rsplit("/", 1)[1])):
            tab.locator(".session-row.is-selected .session-link").click()  # swapped in place
        entry = tab.locator("#transcript .run.is-running")
        entry.get_by_role("button", name="Stop").wait_for()
        tab.wait_for_timeout(300)
        assert entry.get_by_role("button", name="Stop").evaluate(IN_BOX), \
            "a session opened in place shows the start of its transcript"

        # The member scrolls up to read: new output no longer pulls the transcript down.
        tab.evaluate("document.getElementById('transcript').scrollTop = 0")
        entry.locator(".run-out", has_text="line 60").wait_for()
        tab.wait_for_timeout(1200)
        assert tab.evaluate("document.getElementById('transcript').scrollTop") == 0

        # Its end refreshes the header and the session's row, no reload.
        tab.locator("#transcript .run[data-status=succeeded]", has_text="done").wait_for()
        runs = binding.locator(".binding-fact", has_text="Runs").locator("dd")
        runs.filter(has_text="4").wait_for()
        assert binding.locator(".binding-fact", has_text="Last run").locator("dd") \
            .inner_text() == "Reused"
        tab.locator(".session-row.is-selected", has_text="4 runs").wait_for()
        assert binding.locator("time").get_attribute("data-localised") is not None
        assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    finally:
        _wait_all_ended()


def test_a_skill_run_is_labelled_with_its_skill_and_folder(tab, workspace, app):  # noqa: F811
    """A run with a skill says which skill it ran as, and the form says such a command runs
    in the skill's folder; both at 1440 and 390 px (playground-skill-label-*.png)."""
    from sqlalchemy import select

    from app.extensions import db
    from app.models import SandboxConfig
    from tests.fakes.skill_archives import make_zip, skill_md
    from tests.web.test_browser_playground import installed_skill, wait_ready

    config = db.session.scalar(select(SandboxConfig))
    bundle = make_zip({"SKILL.md": skill_md("greeter"),
                       "install.sh": b"#!/bin/sh\necho 'print(\"hi\")' > hi.py\n"})
    with installed_skill(workspace, config, bundle) as skill_id:
        wait_ready(skill_id)
        _open_session(tab, workspace.contributor.email)
        pane = tab.locator("#session-pane")
        help_text = pane.locator("#skill-help")
        assert "skill's folder" in help_text.inner_text()
        assert pane.get_by_label("Skill").get_attribute("aria-describedby") == "skill-help"
        pane.get_by_label("Skill").select_option("greeter")
        pane.get_by_label("Command").fill("python3 hi.py; pwd")
        pane.get_by_role("button", name="Run").click()
        entry = tab.locator("#transcript .run").first
        entry.locator(".run-out").wait_for()
        assert entry.locator(".run-out").inner_text() == "hi\n/opt/weknora/tenant/skills/greeter"
        label = entry.locator(".run-skill").inner_text()
        assert "greeter" in label and "skill's folder" in label
        pane.get_by_label("Skill").select_option("")
        pane.get_by_label("Command").fill("echo plain")
        pane.get_by_role("button", name="Run").click()
        plain = tab.locator("#transcript .run").nth(1)
        plain.locator(".run-out").wait_for()
        assert plain.locator(".run-skill").count() == 0
        tab.reload()  # the stored runs keep their label
        assert "greeter" in tab.locator("#transcript .run").first.locator(".run-skill").inner_text()
        assert tab.locator("#transcript .run").nth(1).locator(".run-skill").count() == 0
        for width, height in ((1440, 900), (390, 844)):
            tab.set_viewport_size({"width": width, "height": height})
            assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            tab.locator("#transcript").scroll_into_view_if_needed()
            tab.mouse.move(0, 0)
            shot(tab, f"playground-skill-label-{width}.png")

