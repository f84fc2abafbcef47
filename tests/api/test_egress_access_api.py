"""Issue 24 item 5: a member asks for a host their session's policy refused; an admin
allows it on the config (a validated policy edit, audited) or declines it."""

from __future__ import annotations

import pytest

from app.extensions import db
from app.models import AuditEvent, SandboxConfig
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sandboxes import egress_access
from app.services.sessions import lifecycle as sessions
from tests.factories import config_doc

REQUESTS = "/api/v1/egress-access-requests"


@pytest.fixture
def world(app, two_tenants, monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    a, b = two_tenants
    config = service.create_config(a.tenant, audit.SystemActor("tests"), "Policed", "",
                                   config_doc("e2b", network={
                                       "deny_egress_by_default": True,
                                       "allow_out": ["pypi.org"]}))
    session = sessions.create_session(a.tenant, a.contributor, config.id, "work")
    return a, b, config, session


def ask(bearer, group, session, **body):
    return bearer(group.contributor, group.tenant).post(
        f"/api/v1/sessions/{session.id}/egress-access-requests",
        json={"host": "files.pythonhosted.org", "reason": "pip wheels", **body})


def test_a_member_asks_and_an_admin_allows_it_on_the_config(world, bearer):
    a, _, config, session = world
    asked = ask(bearer, a, session)
    assert asked.status_code == 201, asked.json
    again = ask(bearer, a, session)  # asking again returns the pending one
    assert again.json["data"]["id"] == asked.json["data"]["id"]
    admin = bearer(a.admin, a.tenant)
    waiting = admin.get(REQUESTS).json["data"]
    assert [(r["host"], r["reason"], r["member_id"]) for r in waiting] == [
        ("files.pythonhosted.org", "pip wheels", a.contributor.id)]

    approved = admin.post(f"{REQUESTS}/{waiting[0]['id']}/approve")

    assert approved.status_code == 200 and approved.json["data"]["status"] == "approved"
    db.session.expire_all()
    stored = db.session.get(SandboxConfig, config.id).config["network"]
    assert stored["allow_out"] == ["pypi.org", "files.pythonhosted.org"]
    assert stored["deny_egress_by_default"] is True
    actions = set(db.session.scalars(db.select(AuditEvent.action).where(
        AuditEvent.tenant_id == a.tenant.id)))
    assert {"egress_access.requested", "egress_access.approved",
            "sandbox_config.updated"} <= actions
    assert admin.get(REQUESTS).json["data"] == []
    assert admin.post(f"{REQUESTS}/{waiting[0]['id']}/approve").status_code == 404


def test_declining_leaves_the_policy_as_it_was(world, bearer):
    a, _, config, session = world
    request_id = ask(bearer, a, session).json["data"]["id"]
    declined = bearer(a.admin, a.tenant).post(f"{REQUESTS}/{request_id}/decline")
    assert declined.json["data"]["status"] == "declined"
    db.session.expire_all()
    assert db.session.get(SandboxConfig, config.id).config["network"]["allow_out"] == [
        "pypi.org"]


def test_who_may_ask_and_decide(world, bearer):
    a, b, config, session = world
    request_id = ask(bearer, a, session).json["data"]["id"]
    # another member's session, another workspace's admin, a member deciding
    other = bearer(a.viewer, a.tenant).post(
        f"/api/v1/sessions/{session.id}/egress-access-requests", json={"host": "x.example"})
    assert other.status_code == 404
    assert bearer(b.admin, b.tenant).post(f"{REQUESTS}/{request_id}/approve").status_code == 404
    assert bearer(b.admin, b.tenant).get(REQUESTS).json["data"] == []
    assert bearer(a.contributor, a.tenant).post(
        f"{REQUESTS}/{request_id}/approve").status_code == 403


def test_bad_hosts_and_too_many_requests_are_refused(world, bearer, monkeypatch):
    a, _, _, session = world
    bad = ask(bearer, a, session, host="not a host")
    assert bad.status_code == 400 and bad.json["error"]["data"]["errors"][0]["field"] == "host"
    assert ask(bearer, a, session, host="*.example.org").status_code == 400
    monkeypatch.setattr(egress_access, "PENDING_PER_MEMBER", 2)
    assert ask(bearer, a, session, host="one.example").status_code == 201
    assert ask(bearer, a, session, host="two.example").status_code == 201
    third = ask(bearer, a, session, host="three.example")
    assert third.status_code == 429 and third.json["error"]["code"] == "quota_exceeded"
