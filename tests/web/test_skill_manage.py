"""The Manage drawer and live chips (reference 10.2, issue 12 items 4-5, issue 27 items 1-2),
server-rendered: progress, stages and the transcript from the durable events, in words; one
poll for every live status of the page that ends by itself; actions answering with the
drawer, the list behind it and a message; Admin-only; values never shown."""

from __future__ import annotations

import time

from app.extensions import db
from app.models import EventKind, InstalledSkill, InstallStatus
from app.services.skills.installs import plan
from app.services.skills.installs.events import EventLog
from tests.conftest import csrf_token
from tests.streams.conftest import make_skill

SECRET = "manage-canary-value-7d1e"


def _installing(tenant) -> InstalledSkill:
    row = make_skill(tenant)
    row.envs = [{"name": "API_TOKEN", "description": "The service token", "required": True}]
    db.session.commit()
    events = EventLog(row.tenant_id, row.id, row.install_message_id)
    events.emit("accepted", 10)
    events.emit("seeding", 28, message="seeding 2 files")
    events.command(f"{plan.PIP} -r requirements.txt", 1)
    events.output("Collecting tinypkg\nSuccessfully installed tinypkg-1.0\n[exit code 0]")
    events.note("no tests found", stage="agent")
    return row


def _post(client, path: str, data: dict | None = None):
    token = csrf_token(client, "/skills")
    return client.post(path, data={"csrf_token": token, **(data or {})},
                       headers={"HX-Request": "true", "X-CSRFToken": token})


def test_the_drawer_shows_progress_stages_and_a_readable_transcript(two_tenants, login_as):
    a, _ = two_tenants
    row = _installing(a.tenant)
    admin = login_as(a.admin, a.tenant)
    page = admin.get(f"/skills/installs/{row.id}", headers={"HX-Request": "true"})
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert 'value="38"' in html and "38%" in html
    # Issue 27 item 2: what runs, in words; stages as sentences, never "seeding · 28%".
    assert ('<li class="stage stage-current" aria-current="step">Installing requirements</li>'
            in html)
    assert '<span class="progress-stage">Installing requirements</span>' in html
    assert f"<code>$ {plan.PIP} -r requirements.txt</code>" in html
    assert '<li class="t-stage">Copying 2 files into the sandbox</li>' in html
    assert " · 28%" not in html and "seeding 2 files" not in html
    assert "<details><summary>Output · 3 lines: [exit code 0]" in html  # collapsed
    assert '<li class="t-note">no tests found</li>' in html
    assert 'id="live-open"' in html  # the page's one poller follows this drawer
    assert "Stop install" in html and "Guidance" not in html  # none applies (issue 27 item 10)
    live = admin.get(f"/skills/installs/live?watch={row.id}&open={row.id}")
    assert live.status_code == 200
    assert 'id="manage-live" class="manage-live" aria-label="Progress" hx-swap-oob="true"' \
        in live.get_data(as_text=True)
    EventLog(row.tenant_id, row.id, row.install_message_id).failed("pip exited with 1")
    row.status, row.error = InstallStatus.failed, "pip exited with 1"
    db.session.commit()
    ended = admin.get(f"/skills/installs/live?watch={row.id}&open={row.id}")
    body = ended.get_data(as_text=True)
    assert '<div id="drawer-slot" hx-swap-oob="innerHTML">' in body  # the drawer, whole
    assert 'id="install-watch"' not in body  # the list it sends polls no more
    assert '<li class="t-error" role="alert">pip exited with 1</li>' in body


def test_the_notes_a_reinstall_was_given_head_its_transcript(two_tenants, login_as):
    """Reference 7.1: reinstall notes are kept with the run; the drawer shows them once,
    labelled, above the transcript (they were written where nobody read them)."""
    a, _ = two_tenants
    row = make_skill(a.tenant)
    events = EventLog(row.tenant_id, row.id, row.install_message_id)
    events.note("use the internal mirror <b>7301</b>")
    events.emit("accepted", 10)
    events.note("waiting for another install or removal on this sandbox config")
    html = login_as(a.admin, a.tenant).get(
        f"/skills/installs/{row.id}", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert '<h3 class="drawer-section">Reinstall notes</h3>' in html
    assert '<p class="reinstall-given">use the internal mirror &lt;b&gt;7301&lt;/b&gt;</p>' in html
    assert html.count("use the internal mirror") == 1  # not repeated in the transcript
    assert '<li class="t-note">waiting for another install' in html


def test_one_poll_answers_for_every_status_on_the_page_until_none_is_in_flight(
        two_tenants, login_as):
    """Issue 27 item 1: one answer swaps every copy of an installation's status (chip,
    result row, drawer header) by its data attribute, so they cannot disagree; once the
    run has its verdict it re-renders the list, without a poller."""
    a, _ = two_tenants
    row = _installing(a.tenant)
    viewer = login_as(a.viewer, a.tenant)
    page = viewer.get("/skills").get_data(as_text=True)
    assert f'hx-get="/skills/installs/live?watch={row.id}"' in page
    assert "chip-link" not in page  # a viewer gets no link to the drawer
    tick = viewer.get(f"/skills/installs/live?watch={row.id}&open={row.id}")
    html = tick.get_data(as_text=True)
    assert tick.status_code == 200
    assert f"hx-swap-oob=\"outerHTML:[data-install-status='{row.id}']\"" in html
    assert "Installing 38%" in html and "Installing requirements" in html
    assert 'id="skill-list"' not in html and "manage-live" not in html  # viewers: no drawer
    row.status, row.enabled = InstallStatus.ready, False
    db.session.commit()
    done = viewer.get(f"/skills/installs/live?watch={row.id}").get_data(as_text=True)
    assert 'id="skill-list"' in done and 'id="install-watch"' not in done
    assert done.count(f'data-install-status="{row.id}"') == 2  # the chip and the swap
    assert '<span class="status-off">Disabled</span>' in done
    row.deleted_at = row.updated_at
    db.session.commit()
    gone = viewer.get(f"/skills/installs/live?watch={row.id}").get_data(as_text=True)
    assert f'data-install-status="{row.id}"' not in gone and 'id="skill-list"' in gone


def test_a_viewer_gets_403_and_another_workspace_gets_404(two_tenants, login_as):
    a, b = two_tenants
    row = _installing(a.tenant)
    viewer = login_as(a.viewer, a.tenant)
    assert viewer.get(f"/skills/installs/{row.id}").status_code == 403
    for action in ("stop", "reinstall", "enabled", "env", "uninstall"):
        assert _post(viewer, f"/skills/installs/{row.id}/{action}").status_code == 403, action
    other = login_as(b.admin, b.tenant)
    assert other.get(f"/skills/installs/{row.id}").status_code == 404
    assert _post(other, f"/skills/installs/{row.id}/stop").status_code == 404
    foreign = other.get(f"/skills/installs/live?watch={row.id}&open={row.id}")
    assert foreign.status_code == 200 and row.id not in foreign.get_data(as_text=True)
    db.session.refresh(row)
    assert row.status == InstallStatus.installing


def test_env_values_are_set_and_cleared_but_never_rendered(two_tenants, login_as):
    a, _ = two_tenants
    row = _installing(a.tenant)
    row.status = InstallStatus.ready
    db.session.commit()
    admin = login_as(a.admin, a.tenant)
    base = f"/skills/installs/{row.id}"
    before = admin.get(base, headers={"HX-Request": "true"}).get_data(as_text=True)
    assert 'type="password"' in before and ">not set<" in before
    saved = _post(admin, f"{base}/env", {"name": "API_TOKEN", "value": SECRET})
    html = saved.get_data(as_text=True)
    assert saved.status_code == 200 and "API_TOKEN saved." in html and ">set<" in html
    assert SECRET not in html
    db.session.refresh(row)
    assert row.env_values == {"API_TOKEN": SECRET}
    empty = _post(admin, f"{base}/env", {"name": "API_TOKEN", "value": ""})
    assert "Enter a value for API_TOKEN" in empty.get_data(as_text=True)
    unknown = _post(admin, f"{base}/env", {"name": "NOT_DECLARED", "value": "x"})
    assert "NOT_DECLARED" not in (row.env_values or {}) and unknown.status_code == 200
    cleared = _post(admin, f"{base}/env", {"name": "API_TOKEN", "clear": "1"})
    assert "API_TOKEN cleared." in cleared.get_data(as_text=True)
    db.session.refresh(row)
    assert not row.env_values
    assert SECRET not in admin.get(base).get_data(as_text=True)


def test_disable_enable_and_stop_answer_with_the_drawer_and_a_message(two_tenants, login_as):
    a, _ = two_tenants
    row = _installing(a.tenant)
    admin = login_as(a.admin, a.tenant)
    base = f"/skills/installs/{row.id}"
    off = _post(admin, f"{base}/enabled", {"enabled": "false"}).get_data(as_text=True)
    assert "is disabled." in off and ">Enable<" in off and 'id="manage-drawer"' in off
    # Issue 27 item 1: the list behind the drawer comes with it, its chip marked disabled.
    assert 'id="skill-list" class="skill-list" aria-label="Skill catalog" hx-swap-oob="true"' \
        in off
    assert off.count('<span class="status-off">Disabled</span>') == 2  # drawer and chip
    on = _post(admin, f"{base}/enabled", {"enabled": "true"}).get_data(as_text=True)
    assert "is enabled." in on and ">Disable<" in on
    stopped = _post(admin, f"{base}/stop").get_data(as_text=True)
    assert "Install stopped." in stopped and "Stop install" not in stopped
    db.session.refresh(row)
    assert (row.status, row.error) == (InstallStatus.failed, "install stopped")
    again = _post(admin, f"{base}/stop").get_data(as_text=True)  # failed: unchanged
    assert 'id="manage-drawer"' in again


def test_uninstall_asks_first_then_shows_its_own_progress_to_removed(two_tenants, login_as):
    """Issue 27 item 3: the question says which values go with the skill; while it is
    removed the drawer offers nothing to edit, and at the end it is a plain Uninstalled
    drawer (it kept its variables, a Removing badge and an empty Actions heading)."""
    from app.services.personal import values as personal
    from app.services.personal.values import Who

    a, _ = two_tenants
    row = _installing(a.tenant)
    row.status = InstallStatus.ready
    row.env_values = {"API_TOKEN": SECRET}
    db.session.commit()
    personal.set_skill_value(Who.user(a.tenant, a.contributor), row.id, "API_TOKEN", "mine")
    db.session.commit()
    admin = login_as(a.admin, a.tenant)
    base = f"/skills/installs/{row.id}"
    first = admin.get(base, headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "Uninstall…" in first and "Yes, uninstall" not in first
    assert "Guidance" not in first  # the fixed installer takes none: nothing to show
    confirm = admin.get(f"{base}?confirm=uninstall", headers={"HX-Request": "true"})
    asked = confirm.get_data(as_text=True)
    assert "Yes, uninstall" in asked
    assert "Deleted with it: the workspace value of <code>API_TOKEN</code> and the personal " \
        "values of 1 member." in asked, asked
    started = _post(admin, f"{base}/uninstall").get_data(as_text=True)
    assert "Uninstall started." in started
    assert 'name="value"' not in started and "Workspace variables" not in started
    assert "<h3 class=\"drawer-section\">Actions</h3>" not in started  # nothing to do now
    deadline = time.monotonic() + 30  # the removal job (in-process) deletes the row
    while time.monotonic() < deadline:
        done = admin.get(f"/skills/installs/live?watch={row.id}&open={row.id}"
                         ).get_data(as_text=True)
        if "drawer-slot" in done:
            break
        assert "Files removed" in done  # the removal's stage list
        time.sleep(0.2)
    assert '<h2 id="drawer-title">Uninstalled</h2>' in done
    assert '<div id="drawer-slot" hx-swap-oob="innerHTML">' in done  # the drawer, whole
    assert "Removing" not in done and 'name="value"' not in done
    db.session.remove()
    assert db.session.get(InstalledSkill, row.id).deleted_at is not None
    assert EventKind.progress  # the removal wrote its own events
