"""Issue 24 item 2, the Egress page: admins see what the workspace's sandboxes reached and
were refused, with the rule, filters, totals per destination, new rows by polling, and
a CSV export whose cells cannot start a formula."""

from __future__ import annotations

import csv
import io
import json
import re
import time

import pytest

from app.backends.docker.egress import log_files
from app.models import Role
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sessions import lifecycle as sessions
from tests.factories import config_doc
from tests.web._support import htmx_headers, text


@pytest.fixture
def world(app, two_tenants, tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_EGRESS_STATE_DIR", str(tmp_path))
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    a, b = two_tenants
    config = service.create_config(a.tenant, audit.SystemActor("tests"), "Tenant sandbox", "",
                                   config_doc("e2b"))
    session = sessions.create_session(a.tenant, a.contributor, config.id, "work")
    other = service.create_config(b.tenant, audit.SystemActor("tests"), "B box", "",
                                  config_doc("e2b"))
    return a, b, config, session, other, tmp_path


def write(state_dir, tenant, config, session=None, **fields):
    record = {"t": time.time(), "protocol": "tls", "host": "pypi.org",
              "address": "151.101.0.223", "port": 443, "verdict": "allowed",
              "rule": "allow_out[0] pypi.org", "sent": 517, "received": 2048, "ms": 30,
              "meta": {"sandlot_tenant_id": str(tenant.id),
                       "sandlot_sandbox_config_id": config.id,
                       "sandlot_session_id": session.id if session else "run-1",
                       "sandlot_purpose": "session" if session else "install"}}
    record.update(fields)
    log_files.append(state_dir, "0123456789", [json.dumps(record)])


def rows(page: str) -> list[str]:
    return re.findall(r'<tr class="egress-row egress-(\w+)">', page)


def test_admins_see_rows_with_rule_totals_and_only_their_workspace(world, login_as):
    a, b, config, session, other, state = world
    write(state, a.tenant, config, session)
    write(state, a.tenant, config, session, protocol="http", host="evil.example", port=80,
          verdict="denied", rule="default deny", received=0)
    write(state, b.tenant, other, host="b-secret.example")

    page = text(login_as(a.admin, a.tenant).get("/egress"))

    assert rows(page) == ["denied", "allowed"]
    assert '<code>evil.example<span class="egress-port">:80</span></code>' in page
    assert "<code>default deny</code>" in page
    assert "<code>allow_out[0] pypi.org</code>" in page
    assert "Tenant sandbox" in page and a.contributor.email in page
    assert "b-secret" not in page
    assert "1 denied" in page  # the destinations' totals
    assert 'href="/egress"' in page and 'aria-current="page"' in page


@pytest.mark.parametrize("role", [Role.contributor, Role.viewer])
def test_members_may_not_open_it(world, login_as, role):
    a, *_ = world
    client = login_as(a.by_role[role], a.tenant)
    assert client.get("/egress").status_code == 403
    assert client.get("/egress.csv").status_code == 403
    assert client.get("/egress/new?after=0").status_code == 403
    assert 'href="/egress"' not in text(client.get("/"))


def test_filters_narrow_the_rows(world, login_as):
    a, b, config, session, other, state = world
    write(state, a.tenant, config, session, host="one.example")
    write(state, a.tenant, config, None, host="install.example", verdict="denied",
          rule="default deny")
    client = login_as(a.admin, a.tenant)

    assert rows(text(client.get("/egress?verdict=denied"))) == ["denied"]
    assert "one.example" in text(client.get(f"/egress?member={a.contributor.id}"))
    assert "install.example" not in text(client.get(f"/egress?member={a.contributor.id}"))
    assert rows(text(client.get("/egress?host=install"))) == ["denied"]
    ignored = text(client.get(f"/egress?config={other.id}&verdict=bogus"))  # not ours: ignored
    assert rows(ignored) == ["denied", "allowed"]


def test_the_first_page_polls_for_rows_newer_than_its_newest(world, login_as):
    a, b, config, session, other, state = world
    write(state, a.tenant, config, session, host="before.example")
    client = login_as(a.admin, a.tenant)
    page = text(client.get("/egress"))
    poll = re.search(r'id="egress-poller" hidden hx-get="([^"]+)"', page).group(1)
    write(state, a.tenant, config, session, host="after.example")

    fresh = text(client.get(poll.replace("&amp;", "&"), headers=htmx_headers(client, "/egress")))

    assert "after.example" in fresh and "before.example" not in fresh
    moved = re.search(r'id="egress-poller" hx-swap-oob="true" hidden hx-get="([^"]+)"', fresh)
    again = text(client.get(moved.group(1).replace("&amp;", "&"),
                            headers=htmx_headers(client, "/egress")))
    assert rows(again) == []  # nothing new since


def test_the_csv_export_neutralises_formulas(world, login_as):
    a, b, config, session, other, state = world
    write(state, a.tenant, config, session, host="pypi.org", rule="=cmd|' /C calc'!A0")

    response = login_as(a.admin, a.tenant).get("/egress.csv")

    assert response.status_code == 200 and response.mimetype == "text/csv"
    table = list(csv.reader(io.StringIO(text(response))))
    assert table[0][:3] == ["at", "verdict", "rule"]
    assert table[1][1] == "allowed" and table[1][2] == "'=cmd|' /C calc'!A0"
    assert table[1][4] == "pypi.org" and table[1][12] == a.contributor.email


def test_an_admin_turns_the_log_off_and_its_rows_go_and_none_are_kept(world, login_as):
    from app.extensions import db
    from app.models import AuditEvent, EgressEvent
    from tests.web._support import post_form

    a, b, config, session, other, state = world
    write(state, a.tenant, config, session, host="kept.example")
    client = login_as(a.admin, a.tenant)
    assert "kept.example" in text(client.get("/egress"))

    off = post_form(client, "/egress/log-setting", {}, token_from="/egress")
    assert off.status_code == 303
    write(state, a.tenant, config, session, host="after.example")
    page = text(client.get("/egress"))

    assert "The egress log is off" in page and rows(page) == []
    assert db.session.query(EgressEvent).filter_by(tenant_id=a.tenant.id).count() == 0
    assert db.session.query(AuditEvent).filter_by(
        tenant_id=a.tenant.id, action="workspace.egress_log_disabled").count() == 1
    on = post_form(client, "/egress/log-setting", {"keep": "on"}, token_from="/egress")
    assert on.status_code == 303 and "Keep an egress log" in text(client.get("/egress"))
    member = login_as(a.contributor, a.tenant)
    assert post_form(member, "/egress/log-setting", {}, token_from="/").status_code == 403


def test_a_member_asks_from_the_run_and_an_admin_allows_from_the_egress_page(world,
                                                                              login_as):
    import uuid

    from app.extensions import db
    from app.models import ExecRun, RunStatus, SandboxConfig
    from app.models.types import utcnow
    from tests.web._support import post_form

    a, b, _, _, other, state = world
    config = service.create_config(a.tenant, audit.SystemActor("tests"), "Tenant sandbox 2",
                                   "", config_doc("e2b", network={
                                       "deny_egress_by_default": True}))
    session = sessions.create_session(a.tenant, a.contributor, config.id, "policed")
    run = ExecRun(id=str(uuid.uuid4()), tenant_id=a.tenant.id, session_id=session.id,
                  user_id=a.contributor.id, command="pip install x", status=RunStatus.failed,
                  exit_code=1, duration_ms=5, finished_at=utcnow(),
                  egress_denied=[{"host": "files.example.org", "port": 443, "count": 1}])
    db.session.add(run)
    db.session.commit()
    member = login_as(a.contributor, a.tenant)
    path = f"/playground/{session.id}"
    fragment = text(member.get(f"{path}/runs/{run.id}", headers=htmx_headers(member, path)))
    assert "Ask for access" in fragment and 'value="files.example.org"' in fragment

    asked = member.post(f"{path}/egress-access", data={"host": "files.example.org",
                                                       "reason": "wheels"},
                        headers=htmx_headers(member, path))
    assert "<span>Asked for <code>files.example.org</code>" in text(asked)

    admin = login_as(a.admin, a.tenant)
    page = text(admin.get("/egress"))
    assert "Access requests" in page and "wheels" in page and a.contributor.email in page
    request_id = re.search(r'/egress/requests/([0-9a-f-]{36})/approve', page).group(1)
    done = post_form(admin, f"/egress/requests/{request_id}/approve", {}, token_from="/egress")
    assert done.status_code == 303
    db.session.expire_all()
    doc = db.session.get(SandboxConfig, config.id).config
    assert "files.example.org" in doc["network"]["allow_out"]
    assert "Access requests" not in text(admin.get("/egress"))
    activity = text(admin.get("/activity"))
    assert "allowed files.example.org on sandbox config “Tenant sandbox 2”" in activity

    # "Also for its running sandboxes": this session has none bound yet.
    member.post(f"{path}/egress-access", data={"host": "wheels.example.org"},
                headers=htmx_headers(member, path))
    request_id = re.search(r'/egress/requests/([0-9a-f-]{36})/approve',
                           text(admin.get("/egress"))).group(1)
    done = post_form(admin, f"/egress/requests/{request_id}/approve", {"running": "1"},
                     token_from="/egress")
    assert ("wheels.example.org is allowed on the config for sandboxes created from now on "
            "and for 0 running sandboxes.") in text(admin.get(done.headers["Location"]))
