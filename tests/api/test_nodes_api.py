"""A web host that owns no Docker engine (issue 28 item 2): its members' commands run on
the engine's node, and with no live node the engine is refused with a sentence, at save
and at exec, instead of being touched from here.

The node is this process's, in a thread, over the real engine and Redis; the web side
is the app with SANDBOX_OWN_ENGINES empty."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.services.sessions import lifecycle as sessions
from tests.api.test_session_terminal import Term, _config, new_ticket
from tests.backends.conftest import BASE_IMAGE
from tests.factories import config_doc
from tests.nodes import RunningNode, own_no_engine

CONFIGS = "/api/v1/sandbox-configs"


@pytest.fixture
def nodeless(app, monkeypatch):
    return own_no_engine(app, monkeypatch)


@pytest.fixture
def node(nodeless) -> Iterator[RunningNode]:
    running = RunningNode(nodeless)
    yield running
    running.stop()


def _doc(**network):
    return config_doc("docker", {"image": BASE_IMAGE}, network=network or None)


def test_commands_run_on_the_node_and_stop_when_it_does(nodeless, node, two_tenants, bearer):
    a, _ = two_tenants
    admin, member = bearer(a.admin, a.tenant), bearer(a.contributor, a.tenant)
    saved = admin.post(CONFIGS, json={"name": "via-node", "config": _doc()})
    assert saved.status_code == 201, saved.json
    session = member.post("/api/v1/sessions", json={
        "sandbox_config_id": saved.json["data"]["id"], "title": "t"}).json["data"]["id"]
    first = member.post(f"/api/v1/sessions/{session}/exec", json={"command": "echo hi"})
    second = member.post(f"/api/v1/sessions/{session}/exec", json={"command": "echo hi"})
    assert first.json["data"]["stdout"] == "hi\n" and second.json["data"]["reused"] is True

    node.stop()
    # the node left the live set on its way out: refused at once, with a sentence
    refused = member.post(f"/api/v1/sessions/{session}/exec", json={"command": "echo hi"})
    assert refused.status_code == 503
    assert "Docker engine has no node running" in refused.json["error"]["message"]
    unsaved = admin.post(CONFIGS, json={"name": "no-node", "config": _doc()})
    assert unsaved.status_code in (400, 422)
    (problem,) = [e for e in unsaved.json["error"]["data"]["errors"]
                  if e["field"] == "docker.engine"]
    assert "no Sandlot node serves the Docker engine 'local'" in problem["message"]
    assert "SANDBOX_" not in problem["message"] and "/" not in problem["message"]
    assert member.delete(f"/api/v1/sessions/{session}").status_code in (200, 202, 204)


def test_a_node_that_cannot_police_takes_only_configs_without_network(
        nodeless, node, two_tenants, bearer):
    """Where the engine's node enforces no egress (an engine it reaches over tcp), an open
    policy would run on Docker's default bridge: refused at save, as on this host."""
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    node.node.info["egress_rules"] = False
    node.node.link.beat(node.node.id, ["local"], node.node.info)
    refused = admin.post(CONFIGS, json={"name": "open", "config": _doc()})
    assert refused.status_code in (400, 422)
    assert "another host" in str(refused.json["error"])
    closed = admin.post(CONFIGS, json={"name": "closed", "config": _doc(
        deny_egress_by_default=True)})
    assert closed.status_code == 201, closed.json


def test_a_terminal_on_a_host_without_the_engine_is_relayed_by_the_node(
        nodeless, node, two_tenants, bearer, live_server):
    """The browser's WebSocket reaches this host; the shell is the node's, over Redis."""
    a, _ = two_tenants
    session = sessions.create_session(a.tenant, a.contributor, _config(a).id, "term")
    assert sessions.exec_command(a.tenant, a.contributor, session, "true").exit_code == 0
    member = bearer(a.contributor, a.tenant)
    term = Term(live_server, new_ticket(member, session)["url"])
    try:
        term.until(b"$ ")
        term.type("echo via-$((6*7)); stty size\r")
        term.until(b"via-42")
        term.until(b"30 100")
        term.type("exit\r")
        assert term.closed()["type"] == "closed"
    finally:
        term.close()
        sessions.destroy_sandboxes(session)
