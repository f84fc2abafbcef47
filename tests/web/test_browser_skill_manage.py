"""Issue 12 and issue 27 items 1-2 in Chromium against the live server and the real Docker
engine: an admin installs a skill, follows it from the result panel into the Manage
drawer, watches the bar move through the stages to done with the chip behind it saying
the same at every moment, reads the transcript as it is printed, sets a declared value,
disables the skill (its chip says so) and re-enables it, and uninstalls it with its own
progress; an upload with a config ticked is followed to Ready in its own panel.
Screenshots at 1440x900 and 390x844."""

from __future__ import annotations

import io
import time

import pytest

from app.services import audit
from app.services.sandboxes import configs
from app.services.skills import catalog as service
from tests import factories
from tests.fakes import skill_registry
from tests.installs.conftest import (
    _cleanup,
    _wait_jobs,
    engine,  # noqa: F401 (fixture)
    install_boxes,
    skill_zip,
)
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]
bundle_dir = skill_registry.bundle_dir  # fixture
SYSTEM = audit.SystemActor("tests")
TAB_TIMEOUT_MS = 20_000
VALUE = "browser-canary-value-51c2"
INSTALL_SH = b"""#!/bin/sh
echo "Collecting report-tools"
sleep 3
echo "Successfully installed report-tools-1.0"
sleep 3
echo ok > marker.txt
"""
FRONTMATTER = ("env:\n  - name: REPORT_TOKEN\n    description: Token for the report API\n"
               "    required: true")


@pytest.fixture
def workspace(bundle_dir, engine):  # noqa: F811 (fixture)
    group = factories.populate("Acme Research")
    configs.create_config(group.tenant, SYSTEM, "Local Docker", "",
                          factories.config_doc("docker", {"network_mode": "none"}))
    data = skill_zip("report-tools", {"install.sh": INSTALL_SH},
                     description="Build weekly reports from CSV exports.",
                     frontmatter=FRONTMATTER)
    service.register_upload(group.tenant, SYSTEM, io.BytesIO(data))
    yield group
    _wait_jobs()
    _cleanup(engine)


def _both_sizes(tab, name: str) -> None:
    tab.wait_for_timeout(300)  # a drawer swapped in slides in: the shot waits for it
    tab.set_viewport_size({"width": 1440, "height": 900})
    shot(tab, f"{name}-1440.png")
    tab.set_viewport_size({"width": 390, "height": 844})
    assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(tab, f"{name}-390.png")
    tab.set_viewport_size({"width": 1440, "height": 900})


def test_admin_watches_an_install_to_done_then_manages_and_uninstalls(tab, workspace):
    tab.set_viewport_size({"width": 1440, "height": 900})
    sign_in(tab, workspace.admin.email)
    tab.goto("/skills")
    card = tab.locator(".skill-card", has_text="report-tools")
    card.get_by_role("link", name="Install", exact=True).click()
    tab.locator(".drawer").get_by_label("Local Docker").check()
    tab.locator(".drawer").get_by_role("button", name="Install").click()
    result = tab.locator("#install-result")
    result.locator(".status-installing .status-label", has_text="%").wait_for()
    card.locator(".chip .status-installing .status-label", has_text="%").wait_for()
    result.get_by_role("link", name="Follow in Manage").click()
    drawer = tab.locator("#manage-drawer")
    drawer.wait_for()
    # Issue 27 item 10: the drawer takes focus itself, not one of its fields.
    tab.wait_for_function("document.activeElement && document.activeElement.id === 'manage-drawer'")
    drawer.get_by_role("progressbar").wait_for()
    skill_id = drawer.locator(".drawer-status .install-status").get_attribute(
        "data-install-status")
    seen, shot_taken, streamed = [], False, False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # Issue 27 item 1: the drawer's status and the chip behind it, read at one moment,
        # say the same (one answer swaps both).
        value, stage, said = tab.evaluate("""id => [
            Number(document.querySelector('#manage-drawer progress').getAttribute('aria-valuenow')),
            document.querySelector('#manage-drawer .progress-stage').textContent,
            [...document.querySelectorAll(`[data-install-status="${id}"]`)].map(
                e => e.querySelector('.status-label').textContent + '|' + e.className)]""",
            skill_id)
        if len(set(said)) != 1:
            # A poll sent just before the drawer opened can land just after it and answer
            # for the chip alone; the next poll (1 s) answers for both at once.
            tab.wait_for_timeout(1500)
            said = tab.evaluate("""id => [...document.querySelectorAll(
                `[data-install-status="${id}"]`)].map(e => e.querySelector('.status-label')
                .textContent + '|' + e.className)""", skill_id)
        assert len(said) == 2 and len(set(said)) == 1, said
        if not seen or seen[-1] != (value, stage):
            seen.append((value, stage))
        # Issue 27 item 2: the installer's first line is there while it still runs.
        output = drawer.locator(".t-output pre").first
        if value < 80 and output.count() and "Collecting report-tools" in output.inner_text() \
                and "[exit code" not in output.inner_text():
            streamed = True
        if not shot_taken and streamed:
            assert drawer.locator(".t-command .t-label").first.inner_text() == \
                "Running install.sh"
            # The output streams as it comes; the stage follows with the next poll (1 s),
            # which a busy machine may answer a moment after the first line arrived.
            drawer.locator(".progress-stage", has_text="Running install.sh").wait_for(
                timeout=5000)
            _both_sizes(tab, "skill-manage-installing")
            shot_taken = True
        if value == 100:
            break
        time.sleep(0.2)
    values = [v for v, _ in seen]
    assert values == sorted(values) and values[-1] == 100, seen
    # It was seen running before it was done (the stages after install.sh may all fall
    # between two polls of a second, so how many were seen depends on the machine's speed).
    assert len(seen) >= 2 and seen[0][0] < 100, seen
    assert seen[-1][1] == "Installed and ready", seen
    assert shot_taken and streamed
    assert not any("agent" in stage or "seeded" in stage for _, stage in seen), seen
    chip = card.locator(".chip .install-status")
    assert chip.locator(".status-label").inner_text() == "Ready"
    assert drawer.locator(".drawer-status .status-label").inner_text() == "Ready"
    tab.wait_for_timeout(1500)  # the finished fragment answered 286: polling has ended
    before = drawer.locator(".stage-list").inner_html()
    tab.wait_for_timeout(1500)
    assert drawer.locator(".stage-list").inner_html() == before
    assert drawer.locator(".stage-done").count() == 8

    # The transcript: the command as code, its output collapsed until opened.
    assert "$ sh install.sh" in drawer.locator(".t-command").first.inner_text() or \
        drawer.locator(".t-command").count() >= 1
    output = drawer.locator(".t-output details", has_text="Successfully installed").first
    output.locator("summary").click()
    output.get_by_text("Collecting report-tools").wait_for()

    # A declared value: saved, shown only as "set", never in the page.
    drawer.get_by_label("Value for REPORT_TOKEN").fill(VALUE)
    drawer.locator(".env-row", has_text="REPORT_TOKEN").get_by_role("button", name="Save").click()
    tab.locator(".flash-text", has_text="REPORT_TOKEN saved.").wait_for()
    drawer.locator(".env-row .badge-ok", has_text="set").wait_for()
    assert VALUE not in tab.content()
    _both_sizes(tab, "skill-manage-ready")

    # A reinstall with notes: they head the new run's transcript, once.
    drawer.get_by_label("Reinstall notes").fill("Rebuilt after the report API moved.")
    drawer.get_by_role("button", name="Reinstall").click()
    given = drawer.locator(".reinstall-given")
    given.wait_for()
    assert given.inner_text() == "Rebuilt after the report API moved."
    assert drawer.locator(".t-note", has_text="report API moved").count() == 0
    _both_sizes(tab, "skill-manage-reinstall-notes")
    drawer.locator(".progress-percent", has_text="100%").wait_for(timeout=90_000)

    drawer.get_by_role("button", name="Disable").click()
    tab.locator(".flash-text", has_text="is disabled.").wait_for()
    # Issue 27 item 1: the chip behind the drawer is marked disabled with it.
    assert card.locator(".chip .status-off").inner_text() == "Disabled"
    assert drawer.locator(".drawer-status .status-off").inner_text() == "Disabled"
    _both_sizes(tab, "skill-manage-disabled")
    tab.get_by_role("link", name="Close").first.click()
    tab.wait_for_timeout(300)
    card.scroll_into_view_if_needed()
    _both_sizes(tab, "skill-chip-disabled")
    card.locator(".chip-link").first.click()
    drawer.wait_for()
    # Issue 27 item 9: the toast hides neither the drawer's header nor its status badge.
    for width in (1440, 390):
        tab.set_viewport_size({"width": width, "height": 900 if width > 400 else 844})
        # (a frame after the resize: the header's new height reaches the toasts' place)
        tab.wait_for_function("""() => {
            const a = document.querySelector('.flash').getBoundingClientRect();
            const b = document.querySelector('#manage-drawer .drawer-head').getBoundingClientRect();
            return !(a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom);
        }""", timeout=2000)
    tab.set_viewport_size({"width": 1440, "height": 900})
    drawer.get_by_role("button", name="Enable").click()
    tab.locator(".flash-text", has_text="is enabled.").wait_for()

    # Issue 27 items 3 and 5: the question, in view and focused, says what goes with it;
    # the removal offers nothing to edit, and its end is a plain Uninstalled drawer.
    drawer.get_by_role("link", name="Uninstall…").click()
    question = drawer.locator(".confirm-box")
    question.get_by_text("Deleted with it: the workspace value of REPORT_TOKEN.").wait_for()
    assert tab.evaluate("document.activeElement.classList.contains('confirm-box')")
    assert question.evaluate("el => { const r = el.getBoundingClientRect();"
                             " return r.top >= 0 && r.bottom <= window.innerHeight; }")
    tab.wait_for_timeout(300)  # the drawer's slide-in, for the screenshot
    _both_sizes(tab, "skill-manage-uninstall-confirm")
    drawer.get_by_role("button", name="Yes, uninstall").click()
    tab.locator(".flash-text", has_text="Uninstall started.").wait_for()
    assert drawer.get_by_label("Value for REPORT_TOKEN").count() == 0
    gone = tab.locator(".drawer", has_text="Uninstalled")
    gone.get_by_text("no longer installed on that config").wait_for(timeout=90_000)
    assert gone.locator("h2").inner_text() == "Uninstalled"
    assert tab.locator("#manage-drawer").count() == 0  # nothing of the old drawer stays
    _both_sizes(tab, "skill-manage-uninstalled")
    tab.goto("/skills")
    assert tab.locator(".skill-card", has_text="report-tools").locator(".chip").count() == 0
    assert "Not installed on any sandbox config yet." in tab.content()


def test_admin_stops_a_slow_install_and_its_sandbox_goes(tab, workspace, engine):  # noqa: F811
    """A deliberately slow installer (a long sleep) is stopped from the drawer: the run
    ends `failed` with "install stopped" at once, and its maintenance sandbox is removed
    (which ends the running command), so the job finishes long before the sleep would."""
    slow = skill_zip("slow-tools", {"install.sh": b"#!/bin/sh\necho starting\nsleep 300\n"},
                     description="Takes its time.")
    service.register_upload(workspace.tenant, SYSTEM, io.BytesIO(slow))
    sign_in(tab, workspace.admin.email)
    tab.goto("/skills")
    card = tab.locator(".skill-card", has_text="slow-tools")
    card.get_by_role("link", name="Install", exact=True).click()
    tab.locator(".drawer").get_by_label("Local Docker").check()
    tab.locator(".drawer").get_by_role("button", name="Install").click()
    tab.get_by_role("link", name="Follow in Manage").click()
    drawer = tab.locator("#manage-drawer")
    drawer.locator(".t-command").first.wait_for(timeout=90_000)  # the installer is running
    started = time.monotonic()

    drawer.get_by_role("button", name="Stop install").click()

    tab.locator(".flash-text", has_text="Install stopped.").wait_for()
    assert drawer.get_by_role("button", name="Stop install").count() == 0
    # The stage list stops where the run did: the installer's stage failed, none after it
    # is shown as done.
    assert drawer.locator(".stage-failed").inner_text() == "Running install.sh"
    assert drawer.locator(".stage-done").count() == 4
    _both_sizes(tab, "skill-manage-stopped")
    _wait_jobs()
    assert time.monotonic() - started < 60  # the sleep was ended, not waited out
    tab.goto("/skills")
    slow_card = tab.locator(".skill-card", has_text="slow-tools")
    assert slow_card.locator(".chip .status-failed").count() == 1
    assert "install stopped" in slow_card.locator(".skill-failure").inner_text()
    assert install_boxes(engine) == []


def test_an_upload_with_a_config_ticked_is_followed_to_ready_in_its_panel(tab, workspace,
                                                                         tmp_path):
    """Issue 27 item 1: the panel after "Add skill" said "Accepted · installing" for good;
    now its row is the install's live status, and it reaches Ready by itself, with the
    card's chip behind it."""
    archive = tmp_path / "quick.zip"
    archive.write_bytes(skill_zip("quick-notes", {"install.sh": b"#!/bin/sh\necho ok\nsleep 2\n"},
                                  description="Keeps quick notes."))
    sign_in(tab, workspace.admin.email)
    tab.goto("/skills")
    tab.get_by_role("link", name="Add skill").first.click()
    drawer = tab.locator(".drawer")
    drawer.get_by_label("ZIP file").set_input_files(str(archive))
    drawer.get_by_label("Local Docker").check()
    drawer.get_by_role("button", name="Add skill").click()
    row = tab.locator("#install-result .result-row", has_text="Local Docker")
    row.locator(".status-installing").wait_for()
    assert "Accepted · installing" not in tab.content()
    tab.wait_for_timeout(300)  # the drawer's slide-in, for the screenshot
    _both_sizes(tab, "skill-upload-installing")
    row.locator(".status-ready").wait_for(timeout=90_000)
    assert row.locator(".status-label").inner_text() == "Ready"
    chip = tab.locator(".skill-card", has_text="quick-notes").locator(".chip .install-status")
    assert "status-ready" in chip.get_attribute("class")
    tab.wait_for_timeout(2500)  # settled: the page polls no more
    assert tab.locator("#install-watch").count() == 0
    _both_sizes(tab, "skill-upload-ready")
