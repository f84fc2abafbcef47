"""An admin ends a member's session from the config's inventory drawer (issue 11 item 6),
in headless Chromium against the live server and the real Docker engine. Screenshots at
1440x900 and 390x844."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.backends.base import SandboxNotFound
from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.models import Job, SandboxSession
from app.models.types import utcnow
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sessions import ending
from app.services.sessions import lifecycle as sessions
from tests import factories
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, require_docker
from tests.jobs.helpers import wait_for_terminal
from tests.web._support import confirm
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]
TAB_TIMEOUT_MS = 20_000


@pytest.fixture
def workspace():
    """A Docker config with a member's live session (a real container) and an idle one."""
    require_docker()
    group = factories.populate("Acme Research")
    config = service.create_config(group.tenant, audit.SystemActor("tests"), "Local Docker",
                                   "The engine on this host.", factories.config_doc(
                                       "docker", {"image": BASE_IMAGE, "network_mode": "none"}))
    live = sessions.create_session(group.tenant, group.contributor, config.id, "Data cleanup")
    outcome = sessions.exec_command(group.tenant, group.contributor, live, "true")
    sessions.create_session(group.tenant, group.viewer, config.id, "Quick look")
    return group, config.id, live.id, outcome.sandbox_id


def open_drawer(tab, email: str):
    sign_in(tab, email)
    tab.goto("/sandboxes")
    tab.locator(".sandbox-card", has_text="Local Docker").get_by_role(
        "link", name="Inventory").click()
    drawer = tab.locator(".drawer")
    drawer.get_by_text("Members' sessions on this config").wait_for()
    return drawer


def test_admin_ends_a_members_session_from_the_inventory(tab, workspace):
    group, config_id, live_id, sandbox_id = workspace
    tab.set_viewport_size({"width": 1440, "height": 900})
    drawer = open_drawer(tab, group.admin.email)
    row = drawer.locator(f"#config-session-{live_id}")
    assert group.contributor.email in row.inner_text() and "Sandbox live" in row.inner_text()
    used = db.session.get(SandboxSession, live_id)
    used.last_used_at = utcnow() - timedelta(minutes=5)
    db.session.commit()
    tab.reload()
    drawer.get_by_text("Members' sessions on this config").wait_for()
    holder = drawer.locator(".inventory-holder")  # the provider's list, named for people
    assert holder.count() == 1
    assert holder.locator(".admin-session-title").inner_text() == "Data cleanup"
    assert group.contributor.email in holder.inner_text() and "used 5 min" in holder.inner_text()
    assert holder.locator("code").get_attribute("title") == f"Session {live_id}"
    assert live_id not in holder.inner_text()  # the id is a tooltip, not the label
    idle = drawer.locator(".admin-session", has_text="Quick look")
    assert group.viewer.email in idle.inner_text() and "No sandbox" in idle.inner_text()
    tab.mouse.move(0, 0)
    shot(tab, "sandbox-sessions.png")
    tab.set_viewport_size({"width": 390, "height": 844})
    assert tab.evaluate("document.documentElement.scrollWidth") <= 390
    tab.locator("#config-sessions").scroll_into_view_if_needed()
    shot(tab, "sandbox-sessions-mobile.png")
    tab.set_viewport_size({"width": 1440, "height": 900})

    row.get_by_role("button", name=re.compile("^End the session “Data cleanup”")).click()
    asked = [confirm(tab)]
    tab.get_by_text("Member's session ended; its sandbox is being removed.").wait_for()
    row.wait_for(state="detached")
    assert asked and asked[-1].startswith(f"End {group.contributor.email}'s session")
    assert drawer.locator(".admin-session").count() == 1
    job_id = db.session.scalar(select(Job.id).where(Job.kind == ending.JOB_KIND))
    assert wait_for_terminal(job_id).result == {"outcome": "removed"}
    engine = DockerBackend({"image": BASE_IMAGE, "host": DOCKER_HOST})
    try:
        with pytest.raises(SandboxNotFound):
            engine.get(sandbox_id)
    finally:
        engine.close()
    db.session.expire_all()
    assert db.session.get(SandboxSession, live_id) is None

    tab.goto(f"/sandboxes/{config_id}/inventory")  # the page with the drawer open
    drawer = tab.locator(".drawer")
    drawer.get_by_text("Members' sessions on this config").wait_for()
    assert tab.locator(".admin-session").count() == 1

    # "End these sessions" (what a delete refused with sandboxes_still_live points to),
    # at both widths, then used.
    end_all = drawer.get_by_role("button", name="End these sessions")
    end_all.scroll_into_view_if_needed()
    tab.mouse.move(0, 0)
    shot(tab, "sandbox-sessions-end-all.png")
    tab.set_viewport_size({"width": 390, "height": 844})
    end_all.scroll_into_view_if_needed()
    box = end_all.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert tab.evaluate("document.documentElement.scrollWidth") <= 390
    shot(tab, "sandbox-sessions-end-all-mobile.png")
    end_all.click()
    assert confirm(tab) == ("End all 1 session on “Local Docker”? Their sandboxes are "
                            "removed, with every file in them.")
    drawer.get_by_text("No member has a session on this config.").wait_for()
    assert drawer.get_by_role("button", name="End these sessions").count() == 0
    db.session.expire_all()
    assert db.session.scalars(select(SandboxSession).where(
        SandboxSession.sandbox_config_id == config_id)).all() == []


def test_a_member_sees_no_inventory_and_cannot_end_anothers_session(tab, workspace):
    group, config_id, live_id, _ = workspace
    sign_in(tab, group.viewer.email)
    response = tab.request.get(f"/sandboxes/{config_id}/inventory")
    assert response.status == 403
    tab.goto("/sandboxes")
    assert tab.locator(".sandbox-card", has_text="Local Docker").get_by_role(
        "link", name="Inventory").count() == 0
    token = tab.locator('meta[name="csrf-token"]').get_attribute("content")
    refused = tab.request.post(f"/sandboxes/sessions/{live_id}/end",
                               headers={"X-CSRFToken": token, "HX-Request": "true"})
    assert refused.status == 403
    db.session.expire_all()
    assert db.session.get(SandboxSession, live_id) is not None
