"""Issue 24 item 2 through the API: the workspace's egress log (admins) and one
session's (its member and admins), from the host's egress log files as the gateway and
the resolver write them. The lines here are written with the gateway's own writer; the
gateway itself is tested on the real engine in tests/backends/test_egress.py."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from app.backends.docker.egress import log_files
from app.extensions import db
from app.models import EgressEvent
from app.models.types import utcnow
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sandboxes import egress_log
from app.services.sessions import lifecycle as sessions
from tests.factories import config_doc

LOG = "/api/v1/egress-log"


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_EGRESS_STATE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def world(app, two_tenants, monkeypatch):
    """Tenant A: a config, a member's session and a viewer's session; tenant B: one."""
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    a, b = two_tenants
    made = {}
    for key, group in (("a", a), ("b", b)):
        config = service.create_config(group.tenant, audit.SystemActor("tests"), "Policed",
                                       "", config_doc("e2b"))
        made[key] = config
        made[f"{key}_session"] = sessions.create_session(group.tenant, group.contributor,
                                                         config.id, "work")
    made["a_viewer_session"] = sessions.create_session(a.tenant, a.viewer, made["a"].id, "mine")
    return a, b, made


def line(tenant, config, session, **fields):
    record = {"t": time.time(), "protocol": "tls", "host": "pypi.org", "address": "151.101.0.223",
              "port": 443, "verdict": "allowed", "rule": "allow_out[0] pypi.org", "sent": 517,
              "received": 4096, "ms": 40,
              "meta": {"sandlot_tenant_id": str(tenant.id),
                       "sandlot_sandbox_config_id": config.id,
                       "sandlot_session_id": session.id if session else "run-x",
                       "sandlot_purpose": "session" if session else "install"}}
    record.update(fields)
    return json.dumps(record)


def write(state_dir, *lines, net_id="0123456789"):
    assert log_files.append(state_dir, net_id, list(lines))


def test_admins_read_their_workspace_log_with_the_deciding_rule(world, state_dir, bearer):
    a, b, made = world
    write(state_dir,
          line(a.tenant, made["a"], made["a_session"]),
          line(a.tenant, made["a"], made["a_session"], protocol="http", host="evil.example",
               address="203.0.113.9", port=80, verdict="denied", rule="default deny",
               sent=80, received=0),
          line(b.tenant, made["b"], made["b_session"], host="b-only.example"))

    answer = bearer(a.admin, a.tenant).get(LOG)

    assert answer.status_code == 200, answer.json
    rows = answer.json["data"]
    assert [(r["host"], r["verdict"], r["rule"]) for r in rows] == [
        ("evil.example", "denied", "default deny"),
        ("pypi.org", "allowed", "allow_out[0] pypi.org")]
    assert rows[1]["member_id"] == a.contributor.id
    assert rows[1]["session_id"] == made["a_session"].id
    assert rows[1]["sent"] == 517 and rows[1]["received"] == 4096 and rows[1]["port"] == 443
    assert answer.json["total"] == 2
    other = bearer(b.admin, b.tenant).get(LOG).json["data"]
    assert [r["host"] for r in other] == ["b-only.example"]  # each workspace its own


def test_filters_and_cursor_paging(world, state_dir, bearer):
    a, _, made = world
    write(state_dir, *[line(a.tenant, made["a"], made["a_session"], host=f"h{i}.example",
                            t=time.time() - i) for i in range(5)],
          line(a.tenant, made["a"], made["a_viewer_session"], host="viewer.example",
               verdict="denied", rule="default deny"))
    admin = bearer(a.admin, a.tenant)

    first = admin.get(f"{LOG}?limit=2&verdict=allowed").json
    second = admin.get(f"{LOG}?limit=2&verdict=allowed&cursor={first['next_cursor']}").json

    assert [r["host"] for r in first["data"] + second["data"]] == [
        "h0.example", "h1.example", "h2.example", "h3.example"]
    assert [r["host"] for r in admin.get(f"{LOG}?verdict=denied").json["data"]] == [
        "viewer.example"]
    assert [r["host"] for r in admin.get(f"{LOG}?member_id={a.viewer.id}").json["data"]] == [
        "viewer.example"]
    assert [r["host"] for r in admin.get(f"{LOG}?host=h3").json["data"]] == ["h3.example"]
    since = (utcnow() - timedelta(seconds=1.5)).replace(tzinfo=None).isoformat()
    assert {r["host"] for r in admin.get(f"{LOG}?since={since}&verdict=allowed").json[
        "data"]} == {"h0.example", "h1.example"}
    stolen = admin.get(f"{LOG}?verdict=denied&cursor={first['next_cursor']}")
    assert stolen.status_code == 400  # a cursor of another filter is refused


def test_members_read_their_own_sessions_log_and_nothing_else(world, state_dir, bearer):
    a, b, made = world
    write(state_dir, line(a.tenant, made["a"], made["a_session"], host="theirs.example"),
          line(a.tenant, made["a"], made["a_viewer_session"], host="mine.example"))
    viewer = bearer(a.viewer, a.tenant)

    own = viewer.get(f"/api/v1/sessions/{made['a_viewer_session'].id}/egress")
    theirs = viewer.get(f"/api/v1/sessions/{made['a_session'].id}/egress")
    workspace = viewer.get(LOG)
    foreign = bearer(b.admin, b.tenant).get(f"/api/v1/sessions/{made['a_session'].id}/egress")
    admin = bearer(a.admin, a.tenant).get(f"/api/v1/sessions/{made['a_session'].id}/egress")

    assert [r["host"] for r in own.json["data"]] == ["mine.example"]
    assert theirs.status_code == 404 and "theirs" not in theirs.get_data(as_text=True)
    assert workspace.status_code == 403
    assert foreign.status_code == 404
    assert [r["host"] for r in admin.json["data"]] == ["theirs.example"]


def test_what_a_sandbox_wrote_is_kept_only_where_it_fits(world, state_dir, bearer):
    """The name is the sandbox's to choose: one that is not a host name is not kept (nor
    a spreadsheet formula); a line naming a session of another workspace gets no session."""
    a, b, made = world
    write(state_dir,
          line(a.tenant, made["a"], made["a_session"], host="=HYPERLINK(\"http://x\")"),
          line(a.tenant, made["a"], made["b_session"], host="cross.example"),
          "not json", json.dumps(["a", "list"]),
          line(a.tenant, made["a"], made["a_session"], host="ok.example", port=99999,
               verdict="maybe", protocol="quic", sent=-5))

    rows = bearer(a.admin, a.tenant).get(LOG).json["data"]

    by_host = {r["host"]: r for r in rows}
    assert set(by_host) == {None, "cross.example", "ok.example"}
    assert by_host["cross.example"]["session_id"] is None
    assert by_host["cross.example"]["member_id"] is None
    odd = by_host["ok.example"]
    assert (odd["port"], odd["verdict"], odd["protocol"], odd["sent"]) == (65535, "failed",
                                                                           "tcp", 0)


def test_a_workspace_that_keeps_no_log_gets_no_rows_and_old_rows_are_swept(
        app, world, state_dir, bearer):
    a, b, made = world
    b.tenant.egress_log_disabled = True
    db.session.commit()
    write(state_dir, line(a.tenant, made["a"], made["a_session"]),
          line(b.tenant, made["b"], made["b_session"]))
    egress_log.ingest()
    assert db.session.query(EgressEvent).filter_by(tenant_id=b.tenant.id).count() == 0
    assert db.session.query(EgressEvent).filter_by(tenant_id=a.tenant.id).count() == 1

    old = EgressEvent(tenant_id=a.tenant.id, at=utcnow() - timedelta(days=8), protocol="tcp",
                      port=1, verdict="allowed", rule="default allow")
    db.session.add(old)
    db.session.commit()
    assert egress_log.sweep() == 1
    assert db.session.query(EgressEvent).filter_by(tenant_id=a.tenant.id).count() == 1


def test_each_line_is_ingested_once_across_rotation_and_a_failed_store(world, state_dir,
                                                                        monkeypatch):
    a, _, made = world
    write(state_dir, line(a.tenant, made["a"], made["a_session"], host="one.example"))

    def broken(rows):
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        log_files.collect(state_dir, broken)
    assert egress_log.ingest() == 1  # the failed pass did not move the cursor
    assert egress_log.ingest() == 0
    monkeypatch.setattr(log_files, "ROTATE_BYTES", 10)
    egress_log.ingest()  # taken whole: renamed away
    write(state_dir, line(a.tenant, made["a"], made["a_session"], host="two.example"))
    assert egress_log.ingest() == 1
    hosts = sorted(db.session.scalars(db.select(EgressEvent.host)))
    assert hosts == ["one.example", "two.example"]
