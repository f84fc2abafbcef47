"""Admins see and end the workspace's sessions (issue 11 item 6, decisions 12).

Attacks first: a member ending another member's session, another workspace's admin, an
API key without full access. Then the real engine: an admin's end removes the member's
container, a forced config delete never ends live sessions (the inventory drawer
ends them), and a session whose
engine is down still ends, its container left to the sweeper, which removes it once the
engine answers again.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.backends.base import SandboxNotFound
from app.errors import NotFound
from app.extensions import db
from app.models import (
    AuditEvent,
    BindingState,
    Job,
    SandboxConfig,
    SandboxRemoval,
    SandboxSession,
)
from app.models.types import utcnow
from app.services.sessions import (
    binding as session_binding,
)
from app.services.sessions import (
    ending as session_end,
)
from app.services.sessions import (
    lifecycle as sessions,
)
from tests.backends.conftest import BASE_IMAGE
from tests.factories import config_doc
from tests.jobs.helpers import wait_for_terminal
from tests.sweeps.routes import make_sandbox_config
from tests.web._support import post_form

LIST = "/api/v1/workspace/sessions"
CONFIGS = "/api/v1/sandbox-configs"


def end_url(session_id: str) -> str:
    return f"{LIST}/{session_id}"


@pytest.fixture
def world(two_tenants):
    """Tenant A with two configs (closed-port E2B, nothing is reached) and sessions of two
    members; tenant B with its own admin."""
    a, b = two_tenants
    first, second = make_sandbox_config(a.tenant), make_sandbox_config(a.tenant)
    mine = sessions.create_session(a.tenant, a.contributor, first, "contributor's").id
    theirs = sessions.create_session(a.tenant, a.viewer, first, "viewer's").id
    other = sessions.create_session(a.tenant, a.viewer, second, "on the second config").id
    return a, b, {"first": first, "second": second}, {"mine": mine, "theirs": theirs,
                                                      "other": other}


def still_there(session_id: str) -> bool:
    db.session.expire_all()
    return db.session.get(SandboxSession, session_id) is not None


def settle_removal_jobs() -> None:
    """Wait for every removal job the test started (each ends on its own: the closed port
    refuses at once)."""
    for job_id in db.session.scalars(select(Job.id).where(
            Job.kind == session_end.JOB_KIND)).all():
        wait_for_terminal(job_id)


# -- attacks ------------------------------------------------------------------------------

def test_a_member_cannot_end_or_list_another_members_session(world, bearer):
    a, _, _, ids = world
    member = bearer(a.contributor, a.tenant)
    assert member.delete(f"/api/v1/sessions/{ids['theirs']}").status_code == 404
    assert member.get(f"/api/v1/sessions/{ids['theirs']}").status_code == 404
    assert member.delete(end_url(ids["theirs"])).status_code == 403
    assert member.get(LIST).status_code == 403
    assert [s["id"] for s in member.get("/api/v1/sessions").json["data"]] == [ids["mine"]]
    assert still_there(ids["theirs"])


def test_another_workspaces_admin_gets_404_and_ends_nothing(world, bearer):
    a, b, configs, ids = world
    foreign = bearer(b.owner, b.tenant)
    assert foreign.delete(end_url(ids["theirs"])).status_code == 404
    assert foreign.delete(f"/api/v1/sessions/{ids['theirs']}").status_code == 404
    assert foreign.get(LIST, query_string={"sandbox_config_id": configs["first"]}
                       ).status_code == 404
    assert foreign.get(LIST).json["data"] == []
    assert still_there(ids["theirs"])


def test_an_api_key_without_full_access_is_refused(world, key_client):
    a, _, _, ids = world
    scoped = key_client(a.tenant, "manage_vector_stores")
    assert scoped.get(LIST).status_code == 403
    assert scoped.delete(end_url(ids["theirs"])).status_code == 403
    assert still_there(ids["theirs"])
    full = key_client(a.tenant)
    assert len(full.get(LIST).json["data"]) == 3
    assert full.delete(end_url(ids["theirs"])).status_code == 200
    assert not still_there(ids["theirs"])
    settle_removal_jobs()


# -- listing ------------------------------------------------------------------------------

def test_admins_list_every_members_sessions_by_config(world, bearer):
    a, _, configs, ids = world
    row = db.session.get(SandboxSession, ids["theirs"])
    row.binding_state, row.sandbox_id, row.provider = BindingState.bound, "sbx-1", "e2b"
    row.traffic_token = "session-traffic-secret"
    db.session.commit()
    admin = bearer(a.admin, a.tenant)
    everything = admin.get(LIST)
    assert everything.status_code == 200
    assert {s["id"] for s in everything.json["data"]} == set(ids.values())
    only = admin.get(LIST, query_string={"sandbox_config_id": configs["first"]}).json["data"]
    by_id = {s["id"]: s for s in only}
    assert set(by_id) == {ids["mine"], ids["theirs"]}
    theirs = by_id[ids["theirs"]]
    assert theirs["owner"] == {"user_id": a.viewer.id, "display_name": a.viewer.email}
    assert theirs["status"] == "live" and by_id[ids["mine"]]["status"] == "idle"
    assert theirs["sandbox_config_id"] == configs["first"]
    assert theirs["sandbox_config_name"].startswith("sweep ")
    assert theirs["created_at"] and theirs["last_used_at"] is None
    assert "session-traffic-secret" not in everything.get_data(as_text=True)
    assert "traffic_token" not in theirs and "sandbox_id" not in theirs


def test_a_config_filter_that_names_nothing_here_is_404(world, bearer):
    a, _, _, _ = world
    admin = bearer(a.owner, a.tenant)
    for value in ("not-a-uuid", "6f1c5a43-2d0e-4a38-9a7a-0d5b0a4c1e11"):
        response = admin.get(LIST, query_string={"sandbox_config_id": value})
        assert response.status_code == 404
        assert response.json["error"]["code"] == "not_found"


# -- ending -------------------------------------------------------------------------------

def test_an_unreachable_provider_still_ends_the_session_and_keeps_the_orphan(world, bearer):
    """E2B refusing (a closed port): the record closes at once, the removal stays for the
    sweeper with a tenant-safe reason, and the audit names the owner."""
    a, _, _, ids = world
    row = db.session.get(SandboxSession, ids["theirs"])
    row.binding_state, row.sandbox_id, row.provider = BindingState.bound, "sbx-lost", "e2b"
    db.session.commit()
    started = time.monotonic()
    response = bearer(a.admin, a.tenant).delete(f"/api/v1/sessions/{ids['theirs']}")
    assert response.status_code == 200, response.json
    assert time.monotonic() - started < 3
    assert response.json["data"]["session_id"] == ids["theirs"]
    job = wait_for_terminal(response.json["data"]["job_id"])
    assert job.status == "succeeded" and job.result == {"outcome": "retry"}
    assert not still_there(ids["theirs"])
    removal = db.session.scalar(select(SandboxRemoval))
    assert removal.session_id == ids["theirs"] and removal.sandbox_id == "sbx-lost"
    assert removal.attempts == 1 and removal.next_attempt_at > utcnow()
    assert "127.0.0.1" not in (removal.last_error or "") and ":9" not in removal.last_error
    event = db.session.scalar(select(AuditEvent).where(AuditEvent.action == "session.deleted"))
    assert event.actor_id == a.admin.id and event.data["owner_id"] == a.viewer.id
    # Not due yet: the sweeper leaves it; once due it retries (still refused) and backs off.
    assert session_end.sweep() == 0
    assert session_end.sweep(utcnow() + timedelta(hours=1)) == 0
    db.session.expire_all()
    assert db.session.get(SandboxRemoval, removal.id).attempts == 2


@pytest.fixture
def docker_world(two_tenants, bearer, engine):
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    config = admin.post(CONFIGS, json={"name": "local", "config": config_doc(
        "docker", {"image": BASE_IMAGE, "network_mode": "none"})})
    assert config.status_code == 201, config.json
    return a, admin, config.json["data"]["id"], bearer(a.contributor, a.tenant)


def start_sandbox(api, config_id: str) -> tuple[str, str]:
    opened = api.post("/api/v1/sessions", json={"sandbox_config_id": config_id, "title": "t"})
    session_id = opened.json["data"]["id"]
    ran = api.post(f"/api/v1/sessions/{session_id}/exec", json={"command": "true"})
    assert ran.status_code == 200, ran.json
    return session_id, ran.json["data"]["sandbox_id"]


def gone(engine, sandbox_id: str) -> bool:
    try:
        engine.get(sandbox_id)
    except SandboxNotFound:
        return True
    return False


def test_an_admin_ends_a_members_session_and_its_container_goes(docker_world, engine):
    _, admin, config_id, member = docker_world
    session_id, sandbox_id = start_sandbox(member, config_id)
    listed = admin.get(LIST, query_string={"sandbox_config_id": config_id}).json["data"]
    assert [(s["id"], s["status"]) for s in listed] == [(session_id, "live")]
    response = admin.delete(end_url(session_id))
    assert response.status_code == 200, response.json
    assert not still_there(session_id)  # closed before the container is touched
    job = wait_for_terminal(response.json["data"]["job_id"])
    assert job.status == "succeeded" and job.result == {"outcome": "removed"}, job.error
    assert gone(engine, sandbox_id)
    assert db.session.scalar(select(SandboxRemoval)) is None
    assert member.get(f"/api/v1/sessions/{session_id}").status_code == 404


def test_a_forced_delete_never_ends_live_sessions_the_admin_ends_them_first(
        docker_world, engine, bearer, login_as):
    """Reference 3.1.5 and decisions 10: force overrides only an unverifiable inventory.
    The inventory drawer's "End these sessions" ends them all; then the delete goes."""
    a, admin, config_id, member = docker_world
    _, first = start_sandbox(member, config_id)
    _, second = start_sandbox(bearer(a.viewer, a.tenant), config_id)
    for query in ({}, {"force": "true"}):
        refused = admin.delete(f"{CONFIGS}/{config_id}", query_string=query)
        assert refused.status_code == 409, refused.json
        assert refused.json["error"]["code"] == "sandboxes_still_live"
    assert len(db.session.scalars(select(SandboxSession)).all()) == 2
    assert not gone(engine, first) and not gone(engine, second)

    client = login_as(a.admin, a.tenant)
    page = client.get(f"/sandboxes/{config_id}/inventory").get_data(as_text=True)
    assert "End these sessions" in page and "Force delete" not in page
    ended = post_form(client, f"/sandboxes/{config_id}/sessions/end", htmx=True)
    assert ended.status_code == 200
    assert "2 sessions ended" in ended.get_data(as_text=True)
    assert db.session.scalar(select(SandboxSession)) is None
    settle_removal_jobs()
    assert gone(engine, first) and gone(engine, second)
    assert admin.delete(f"{CONFIGS}/{config_id}").status_code == 200


def test_an_engine_that_is_down_leaves_the_orphan_to_the_sweeper(docker_world, engine, app,
                                                                 monkeypatch):
    """Engine down when the session ends: the record closes, the container stays; once the
    engine answers, the sweeper removes it."""
    _, admin, config_id, member = docker_world
    session_id, sandbox_id = start_sandbox(member, config_id)
    offered = app.config["SANDBOX_DOCKER_ENGINES"]
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", json.dumps(
        {"local": {"url": "unix:///tmp/sandlot-no-engine.sock"}}))
    try:
        response = admin.delete(f"/api/v1/sessions/{session_id}")
        assert response.status_code == 200, response.json
        job = wait_for_terminal(response.json["data"]["job_id"])
        assert job.result == {"outcome": "retry"}
        assert not still_there(session_id)
        assert not gone(engine, sandbox_id)  # the orphan, known to the removals table
        assert session_end.sweep(utcnow() + timedelta(hours=1)) == 0
    finally:
        monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", offered)
    assert session_end.sweep() == 0  # not due yet
    assert session_end.sweep(utcnow() + timedelta(hours=2)) == 1
    assert gone(engine, sandbox_id)
    assert db.session.scalar(select(SandboxRemoval)) is None


def test_a_sandbox_created_for_a_session_ended_meanwhile_is_removed(docker_world, engine):
    """The race: an admin ends the session while its first exec is creating the sandbox.
    The creator finds its binding gone and removes what it made; nothing is left running."""
    _, admin, config_id, member = docker_world
    opened = member.post("/api/v1/sessions", json={"sandbox_config_id": config_id})
    session = db.session.get(SandboxSession, opened.json["data"]["id"])
    assert session_binding._claim(session)  # the first exec holds the right to create
    db.session.refresh(session)
    ended = admin.delete(end_url(session.id))
    assert ended.status_code == 200
    config = db.session.get(SandboxConfig, config_id)
    with pytest.raises(NotFound):
        session_binding._create_claimed(session, config, sessions.backend_for(config.config))
    assert wait_for_terminal(ended.json["data"]["job_id"]).status == "succeeded"
    assert engine.list({"sandlot_session_id": opened.json["data"]["id"]}) == []
    with pytest.raises(NotFound):  # and a later exec on it is a 404, not a crash
        session_binding.ensure_sandbox(session, config, sessions.backend_for(config.config))


def test_the_reaper_thread_retries_due_removals(world, app):
    """The sweeper is not only a function: the reaper thread beside every worker runs it."""
    import threading

    from app.jobs.queue import start_reaper

    a, _, configs, _ = world
    db.session.add(SandboxRemoval(tenant_id=a.tenant.id, sandbox_config_id=configs["first"],
                                  session_id="0d6c1f6e-51b8-4a6e-a2c4-3cf0b5a1e0aa",
                                  sandbox_id="sbx-orphan", next_attempt_at=utcnow()))
    db.session.commit()
    stop = threading.Event()
    thread = start_reaper(app, interval=0.05, stop=stop)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            db.session.expire_all()
            if db.session.scalar(select(SandboxRemoval.attempts)) >= 1:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(10)
    removal = db.session.scalar(select(SandboxRemoval))
    assert removal.attempts == 1 and removal.last_error  # tried (the port refuses), kept
