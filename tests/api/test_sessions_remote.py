"""Sessions on E2B and Cube, through the real SDK against the local fake provider."""

from __future__ import annotations

import pytest

from app.backends.e2b import cube
from app.extensions import db
from app.models import SandboxSession
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, require_docker
from tests.jobs.helpers import wait_for_terminal

# Configs here point at loopback fakes: the operator allows private endpoints.
pytestmark = pytest.mark.usefixtures("private_endpoints")

CONFIGS = "/api/v1/sandbox-configs"


@pytest.fixture(params=["e2b", "cube"])
def provider(request):
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer(request.param, image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}s{request.param}").start()
    yield request.param, server
    server.stop()


def remote_config(admin, kind: str, server, **fields) -> dict:
    """A config of the fake provider `server` saved through the API (the answer's JSON)."""
    settings = server.settings()
    allow_private = settings.pop("allow_private_endpoints")
    config = admin.post(CONFIGS, json={"name": kind, "config": {
        "sandbox_type": kind, "allow_private_endpoints": allow_private, kind: settings,
        **fields}}).json
    assert "data" in config, config
    return config


def test_session_on_remote_provider_creates_once_and_reuses(two_tenants, bearer, provider):
    kind, server = provider
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    config = remote_config(admin, kind, server, env_vars={"FROM_CONFIG": "yes"}, network={
        "deny_egress_by_default": True, "allow_out": ["*.pypi.org"]})
    session_id = admin.post("/api/v1/sessions",
                            json={"sandbox_config_id": config["data"]["id"]}).json["data"]["id"]
    first = admin.post(f"/api/v1/sessions/{session_id}/exec",
                       json={"command": "echo $FROM_CONFIG"}).json["data"]
    assert first["stdout"] == "yes\n" and first["reused"] is False
    (create,) = server.creates
    body = create.body
    assert body["metadata"]["sandlot_session_id"] == session_id
    assert body["metadata"]["sandlot_purpose"] == "session"
    assert "0.0.0.0/0" in str(body)  # deny-by-default reached the provider

    if kind == "cube":  # a restarted app only knows the token from the session row
        row = db.session.get(SandboxSession, session_id)
        db.session.refresh(row)
        assert row.traffic_token
        cube._traffic_tokens.clear()
    second = admin.post(f"/api/v1/sessions/{session_id}/exec",
                        json={"command": "echo again"}).json["data"]
    assert second["stdout"] == "again\n" and second["reused"] is True
    assert second["sandbox_id"] == first["sandbox_id"]
    assert len(server.creates) == 1
    ended = admin.delete(f"/api/v1/sessions/{session_id}")
    assert ended.status_code == 200
    assert wait_for_terminal(ended.json["data"]["job_id"]).result == {"outcome": "removed"}
