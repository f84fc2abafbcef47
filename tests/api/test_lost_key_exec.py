"""Issue 14 item 5 on the real Docker engine: after the key that sealed a config's env
values is replaced, a session still runs on that config; the unreadable value is unset
in the sandbox (not an empty string), the readable ones are there."""

from __future__ import annotations

import pytest

from app.extensions import db
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.sweeps import secrets as planted

CONFIGS = "/api/v1/sandbox-configs"


@pytest.fixture(autouse=True)
def _engine():
    require_docker()


def test_exec_runs_with_lost_env_values_unset(app, two_tenants, bearer):
    a, _ = two_tenants
    admin, member = bearer(a.admin, a.tenant), bearer(a.contributor, a.tenant)
    config = admin.post(CONFIGS, json={"name": "local", "config": {
        "sandbox_type": "docker", "env_vars": {"LOST_ONE": "sealed-by-old-key"},
        "docker": {"image": BASE_IMAGE, "network_mode": "none"}}}).json["data"]
    with planted.using_keys(app, [planted.new_key()]):
        db.session.expire_all()
        config_doc = admin.get(f"{CONFIGS}/{config['id']}").json["data"]["config"]
        config_doc["env_vars"] = {"LOST_ONE": "", "FRESH": "typed-after"}
        # Not re-entered: the save is refused, and the config keeps working meanwhile.
        assert admin.put(f"{CONFIGS}/{config['id']}",
                         json={"name": "local", "config": config_doc}).status_code == 400
        session = member.post("/api/v1/sessions", json={"sandbox_config_id": config["id"]})
        assert session.status_code == 201, session.json
        session_id = session.json["data"]["id"]
        try:
            out = member.post(f"/api/v1/sessions/{session_id}/exec", json={
                "command": "echo ${LOST_ONE-unset}"})
            assert out.status_code == 200, out.json
            assert out.json["data"]["stdout"] == "unset\n"
            assert "sealed-by-old-key" not in out.get_data(as_text=True)
        finally:
            assert member.delete(f"/api/v1/sessions/{session_id}").status_code in (200, 204)
        db.session.rollback()
