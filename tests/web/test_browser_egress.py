"""The Egress page in headless Chromium (issue 24 item 2): rows with their rules, a new
connection appearing by itself, filters, the phone layout and axe. Screenshots at
1440x900 and 390x844."""

from __future__ import annotations

import pytest

from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sandboxes import egress_access
from app.services.sessions import lifecycle as sessions
from tests import factories
from tests.web.test_a11y import PHONE, overflow, serious
from tests.web.test_browser import shot, sign_in
from tests.web.test_egress_page import write

pytestmark = [pytest.mark.browser]


@pytest.fixture
def workspace(app, tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_EGRESS_STATE_DIR", str(tmp_path))
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    group = factories.populate("Acme Research")
    config = service.create_config(group.tenant, audit.SystemActor("tests"), "Tenant sandbox",
                                   "", factories.config_doc("e2b"))
    session = sessions.create_session(group.tenant, group.contributor, config.id, "Data work")
    write(tmp_path, group.tenant, config, session)
    write(tmp_path, group.tenant, config, session, host="files.pythonhosted.org",
          received=9_400_000, sent=2100)
    write(tmp_path, group.tenant, config, session, protocol="http", host="api.example.com",
          port=80, verdict="denied", rule="default deny", received=0, sent=90)
    egress_access.request_access(group.tenant, group.contributor, session, "api.example.com",
                                 "The weather skill calls it")
    write(tmp_path, group.tenant, config, None, protocol="tcp", host=None,
          address="192.0.2.10", port=5432, verdict="denied",
          rule="built-in: documentation (TEST-NET-1)", received=0, sent=0)
    return group, config, session, tmp_path


def test_an_admin_reads_the_log_and_sees_new_connections_arrive(tab, workspace):
    group, config, session, state = workspace
    tab.set_viewport_size({"width": 1440, "height": 900})
    sign_in(tab, group.admin.email)
    tab.get_by_role("link", name="Egress").click()
    tab.wait_for_url("**/egress")
    table = tab.locator("#egress-rows")
    assert table.locator("tr").count() == 4
    denied = table.locator("tr.egress-denied", has_text="api.example.com")
    assert "default deny" in denied.inner_text() and group.contributor.email in denied.inner_text()
    assert tab.locator(".dash-line", has_text="files.pythonhosted.org").count() == 1
    request = tab.locator(".egress-request", has_text="api.example.com")
    assert "The weather skill calls it" in request.inner_text()
    assert request.get_by_role("button", name="Allow on Tenant sandbox").is_visible()
    assert request.get_by_label("Also for its running sandboxes").is_visible()
    assert serious(tab) == []
    tab.mouse.move(0, 0)
    shot(tab, "egress.png")

    write(state, group.tenant, config, session, host="new.example.org", verdict="denied",
          rule="default deny", protocol="tls", received=0)
    table.locator("tr", has_text="new.example.org").wait_for(timeout=15_000)
    assert table.locator("tr").first.inner_text().count("new.example.org") == 1

    tab.get_by_label("Verdict").select_option("denied")
    tab.get_by_role("button", name="Show").click()
    tab.wait_for_url("**verdict=denied**")
    assert table.locator("tr.egress-allowed").count() == 0
    assert table.locator("tr.egress-denied").count() == 3

    tab.set_viewport_size(PHONE)
    tab.goto("/egress")
    assert overflow(tab) <= 0
    assert serious(tab) == []
    shot(tab, "egress-mobile.png")


def test_an_empty_log_says_where_rows_come_from(tab, app, tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_EGRESS_STATE_DIR", str(tmp_path))
    group = factories.populate("Quiet Co")
    sign_in(tab, group.admin.email)
    tab.goto("/egress")
    assert "E2B and Cube enforce egress in their own networks" in tab.inner_text("main")
    assert not tab.locator(".egress-table").is_visible()
    assert serious(tab) == []


def test_a_member_asks_for_a_refused_host_under_the_run(tab, workspace):
    import uuid

    from app.extensions import db
    from app.models import ExecRun, RunStatus
    from app.models.types import utcnow

    group, config, session, _ = workspace
    db.session.add(ExecRun(id=str(uuid.uuid4()), tenant_id=group.tenant.id,
                           session_id=session.id, user_id=group.contributor.id,
                           command="pip install requests", status=RunStatus.failed,
                           exit_code=1, duration_ms=1200, finished_at=utcnow(),
                           stderr="ERROR: Could not find a version that satisfies the "
                                  "requirement requests\n",
                           egress_denied=[{"host": "pypi.org", "port": 443, "count": 3}]))
    db.session.commit()
    sign_in(tab, group.contributor.email)
    tab.set_viewport_size(PHONE)
    tab.goto(f"/playground/{session.id}")
    note = tab.locator(".run-denied")
    assert "pypi.org:443" in note.inner_text() and "×3" in note.inner_text()
    note.get_by_label("Why the sandbox needs pypi.org").fill("pip installs")
    note.get_by_role("button", name="Ask for access").click()
    note.get_by_text("Asked for").wait_for()
    assert "an admin of this workspace will see it" in note.inner_text()
    assert overflow(tab) <= 0
    assert serious(tab) == []
    note.scroll_into_view_if_needed()
    shot(tab, "playground-egress-denied-mobile.png")
    reasons = {r.host: r.reason for r in egress_access.pending(group.tenant)}
    assert reasons["pypi.org"] == "pip installs"
