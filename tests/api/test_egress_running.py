"""Issue 24 on a config's running Docker sandboxes, through the API: an admin who allows
an asked-for host may apply it to them at once, and the sandbox check says when the
egress gateway is down while they run. Real engine; the sandbox connects nowhere."""

from __future__ import annotations

import os
import signal
import time

import pytest

from app.backends.docker.egress import gateway, manager
from app.extensions import db
from app.models import AuditEvent
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sandboxes import egress_daemons
from app.services.sessions import lifecycle as sessions
from tests.api.test_sandbox_check import URL as CHECK
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.backends.test_egress import require_egress
from tests.factories import config_doc

REQUESTS = "/api/v1/egress-access-requests"


@pytest.fixture
def world(app, two_tenants):
    require_docker()
    require_egress()
    a, _ = two_tenants
    config = service.create_config(a.tenant, audit.SystemActor("tests"), "Policed", "",
                                   config_doc("docker", {"image": BASE_IMAGE}, network={
                                       "deny_egress_by_default": True,
                                       "allow_out": ["pypi.org"]}))
    session = sessions.create_session(a.tenant, a.contributor, config.id, "work")
    assert sessions.exec_command(a.tenant, a.contributor, session, "true").exit_code == 0
    yield a, config, session
    sessions.destroy_sandboxes(session)


def sandbox_net(session):
    [net] = [n for n in manager.Daemons().policed()
             if n.metadata.get("sandlot_session_id") == session.id]
    return net


def ask(bearer, group, session, host):
    response = bearer(group.contributor, group.tenant).post(
        f"/api/v1/sessions/{session.id}/egress-access-requests", json={"host": host})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


def test_allowing_a_host_reaches_the_running_sandboxes_only_when_asked(world, bearer):
    a, config, session = world
    admin = bearer(a.admin, a.tenant)

    plain = admin.post(f"{REQUESTS}/{ask(bearer, a, session, 'one.example')}/approve")
    assert plain.status_code == 200 and plain.json["data"]["running_sandboxes"] is None
    assert sandbox_net(session).policy.domains == ("pypi.org",)  # new sandboxes only

    applied = admin.post(f"{REQUESTS}/{ask(bearer, a, session, 'two.example')}/approve",
                         json={"apply_to_running": True})

    assert applied.status_code == 200, applied.json
    assert applied.json["data"]["running_sandboxes"] == {"updated": 1, "kept": 0}
    assert sandbox_net(session).policy.domains == ("pypi.org", "one.example", "two.example")
    db.session.expire_all()
    assert db.session.get(type(session), session.id).policy["allow_out"] == [
        "pypi.org", "one.example", "two.example"]
    [event] = db.session.scalars(db.select(AuditEvent).where(
        AuditEvent.action == "sandbox_config.policy_applied_to_running"))
    assert event.data == {"config": "Policed", "updated": 1, "kept": 0}
    bad = admin.post(f"{REQUESTS}/{ask(bearer, a, session, 'three.example')}/approve",
                     json={"apply_to_running": "yes please"})
    assert bad.status_code == 400


def test_the_check_says_when_the_gateway_is_down_while_the_config_s_sandboxes_run(
        world, bearer):
    a, config, _ = world
    admin = bearer(a.admin, a.tenant)
    daemons = manager.Daemons()
    os.kill(int(gateway.pid_path(daemons.settings.state_dir).read_text()), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while daemons.gateway_running() and time.monotonic() < deadline:
        time.sleep(0.05)

    down = admin.post(CHECK, json={"config_id": config.id}).json["data"]

    assert down["ok"] is False
    assert down["checks"][0]["name"] == "egress_gateway"
    assert down["checks"][0]["ok"] is False
    assert "1 running sandbox of this config has no network" in down["checks"][0]["message"]

    assert egress_daemons.supervise() == ["gateway"]
    up = admin.post(CHECK, json={"config_id": config.id}).json["data"]
    assert "egress_gateway" not in [row["name"] for row in up["checks"]]
