"""The identity-change and delete protocols against the real Docker engine (reference
3.1.4-3.1.5, 9.4; decisions 10), including a real concurrent request refused with 423."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import uuid

import pytest
import requests

from app.backends.base import SandboxSpec
from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.models import SandboxConfig
from tests.backends.conftest import BUSYBOX_IMAGE, DOCKER_HOST, RUN_ID, RUN_LABEL, require_docker
from tests.factories import config_doc

BASE = "/api/v1/sandbox-configs"
MISSING_SOCKET = "unix:///tmp/sandlot-test-no-engine.sock"


@pytest.fixture(autouse=True)
def _engine(app, monkeypatch):
    require_docker()
    # Two names for the one real engine, so a config can change identity (engine) while
    # the old identity's sandboxes stay listable; and one engine that is not there.
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", {
        "local": {"url": DOCKER_HOST}, "other": {"url": DOCKER_HOST},
        "missing": {"url": MISSING_SOCKET}})


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


@pytest.fixture
def engine():
    backend = DockerBackend({"image": BUSYBOX_IMAGE, "host": DOCKER_HOST, "http_timeout_sec": 30})
    created: list[str] = []
    yield backend, created
    for sandbox_id in created:
        backend.delete(sandbox_id)
    backend.close()


def docker_doc(engine: str = "", timeout: int = 10, image: str = BUSYBOX_IMAGE) -> dict:
    return config_doc("docker", {"image": image, "engine": engine, "http_timeout_sec": timeout})


def create(api, engine: str = "", timeout: int = 10) -> dict:
    response = api.post(BASE, json={"name": f"cfg-{uuid.uuid4().hex[:6]}",
                                    "config": docker_doc(engine, timeout)})
    assert response.status_code == 201, response.json
    return response.json["data"]


def start_sandbox(engine, tenant_id: int, config_id: str) -> str:
    backend, created = engine
    info = backend.create(SandboxSpec(template=BUSYBOX_IMAGE, network_mode="none", metadata={
        "sandlot_tenant_id": str(tenant_id), "sandlot_session_id": "sess-1",
        "sandlot_binding_version": "1", "sandlot_provider": "docker",
        "sandlot_sandbox_config_id": config_id, "sandlot_purpose": "session",
        RUN_LABEL: RUN_ID}))
    created.append(info.id)
    return info.id


def stored(config_id: str) -> SandboxConfig:
    db.session.expire_all()
    return db.session.get(SandboxConfig, config_id)


def test_inventory_lists_live_sandboxes_of_this_config_only(two_tenants, admin_api, engine):
    a, _ = two_tenants
    mine, other = create(admin_api), create(admin_api)
    start_sandbox(engine, a.tenant.id, mine["id"])
    inventory = admin_api.get(f"{BASE}/{mine['id']}/sandboxes").json["data"]
    assert inventory == {"sandbox_count": 1, "session_ids": ["sess-1"], "agent_names": [],
                         "unverifiable": False}
    assert admin_api.get(f"{BASE}/{other['id']}/sandboxes").json["data"]["sandbox_count"] == 0


def test_identity_change_refused_while_sandboxes_live(two_tenants, admin_api, engine):
    a, _ = two_tenants
    data = create(admin_api)
    sandbox_id = start_sandbox(engine, a.tenant.id, data["id"])
    response = admin_api.put(f"{BASE}/{data['id']}", json={
        "name": data["name"], "config": docker_doc(engine="other")})
    assert response.status_code == 409
    error = response.json["error"]
    assert error["code"] == "sandboxes_still_live"
    assert error["data"]["sandbox_count"] == 1 and error["data"]["session_ids"] == ["sess-1"]
    row = stored(data["id"])
    assert row.config["docker"]["engine"] == "local" and row.cordoned_at is None
    # Force never overrides live sandboxes.
    forced = admin_api.put(f"{BASE}/{data['id']}?force=true", json={
        "name": data["name"], "config": docker_doc(engine="other")})
    assert forced.status_code == 409
    engine[0].delete(sandbox_id)
    ok = admin_api.put(f"{BASE}/{data['id']}", json={
        "name": data["name"], "config": docker_doc(engine="other")})
    assert ok.status_code == 200
    assert stored(data["id"]).config["docker"]["engine"] == "other"


def test_non_identity_change_needs_no_inventory(two_tenants, admin_api, engine):
    a, _ = two_tenants
    data = create(admin_api)
    start_sandbox(engine, a.tenant.id, data["id"])
    doc = docker_doc()
    doc["default_timeout_sec"] = 90
    response = admin_api.put(f"{BASE}/{data['id']}", json={"name": "renamed", "config": doc})
    assert response.status_code == 200
    assert stored(data["id"]).config["default_timeout_sec"] == 90


def test_unreachable_old_provider_refuses_unless_forced(admin_api):
    data = create(admin_api, engine="missing")
    body = {"name": data["name"], "config": docker_doc(engine="")}
    response = admin_api.put(f"{BASE}/{data['id']}", json=body)
    assert response.status_code == 409
    assert response.json["error"]["code"] == "sandbox_inventory_unverifiable"
    assert stored(data["id"]).config["docker"]["engine"] == "missing"
    assert stored(data["id"]).cordoned_at is None
    assert admin_api.put(f"{BASE}/{data['id']}?force=true", json=body).status_code == 200
    assert stored(data["id"]).config["docker"]["engine"] == "local"


def test_delete_protocol(two_tenants, admin_api, engine):
    a, _ = two_tenants
    live = create(admin_api)
    sandbox_id = start_sandbox(engine, a.tenant.id, live["id"])
    response = admin_api.delete(f"{BASE}/{live['id']}")
    assert response.status_code == 409
    assert response.json["error"]["code"] == "sandboxes_still_live"
    # Force overrides only an unverifiable inventory, never a live sandbox (reference
    # 3.1.5, decisions 10): nothing is deleted, the sandbox stays.
    forced = admin_api.delete(f"{BASE}/{live['id']}?force=true")
    assert forced.status_code == 409, forced.json
    assert forced.json["error"]["code"] == "sandboxes_still_live"
    assert stored(live["id"]).deleted_at is None and stored(live["id"]).cordoned_at is None
    assert engine[0].get(sandbox_id)
    engine[0].delete(sandbox_id)  # its holder ended it
    assert admin_api.delete(f"{BASE}/{live['id']}").json == {"success": True, "data": None}
    assert admin_api.get(f"{BASE}/{live['id']}").status_code == 404

    idle = create(admin_api)
    assert admin_api.delete(f"{BASE}/{idle['id']}").json == {"success": True, "data": None}

    lost = create(admin_api, engine="missing")
    response = admin_api.delete(f"{BASE}/{lost['id']}")
    assert response.json["error"]["code"] == "sandbox_inventory_unverifiable"
    assert admin_api.delete(f"{BASE}/{lost['id']}?force=true").status_code == 200


def test_deleted_name_can_be_reused(admin_api):
    data = create(admin_api)
    assert admin_api.delete(f"{BASE}/{data['id']}").status_code == 200
    again = admin_api.post(BASE, json={"name": data["name"], "config": docker_doc()})
    assert again.status_code == 201


class SilentEngine:
    """A unix socket that accepts connections and never answers: a hung Docker engine."""

    def __init__(self):
        self.path = os.path.join(tempfile.mkdtemp(prefix="sandlot-silent-"), "docker.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        self.server.close()
        for conn in self.held:
            conn.close()


def test_concurrent_mutation_gets_423_while_identity_change_holds_the_cordon(
        two_tenants, live_server, app, monkeypatch):
    a, _ = two_tenants
    silent = SilentEngine()
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", {
        **app.config["SANDBOX_DOCKER_ENGINES"], "silent": {"url": f"unix://{silent.path}"}})
    try:
        token = requests.post(f"{live_server}/api/v1/auth/login", timeout=10, json={
            "email": a.admin.email, "password": "correct-horse-battery",
            "tenant_id": a.tenant.id}).json()["data"]["token"]
        headers = {"Authorization": f"Bearer {token}"}
        created = requests.post(f"{live_server}{BASE}", headers=headers, timeout=10, json={
            "name": "slow", "config": docker_doc(engine="silent", timeout=3)})
        config_id = created.json()["data"]["id"]
        first: dict = {}

        def change_identity():
            first["response"] = requests.put(
                f"{live_server}{BASE}/{config_id}", headers=headers, timeout=30,
                json={"name": "slow", "config": docker_doc(engine="")})

        worker = threading.Thread(target=change_identity)
        worker.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            db.session.expire_all()
            if db.session.get(SandboxConfig, config_id).cordoned_at is not None:
                break
            time.sleep(0.05)
        second = requests.put(f"{live_server}{BASE}/{config_id}", headers=headers, timeout=10,
                              json={"name": "renamed", "config": docker_doc(
                                  engine="silent", timeout=3)})
        worker.join(30)
        assert second.status_code == 423, second.text
        assert second.json()["error"]["code"] == "sandbox_config_cordoned"
        assert first["response"].status_code == 409
        assert first["response"].json()["error"]["code"] == "sandbox_inventory_unverifiable"
        row = stored(config_id)
        assert row.cordoned_at is None and row.name == "slow"
    finally:
        silent.close()


def test_templates_query_lists_local_images_for_docker(admin_api):
    data = create(admin_api)
    response = admin_api.post(f"{BASE}/templates/query", json={"config_id": data["id"]})
    assert response.status_code == 200, response.json
    body = response.json["data"]
    assert body["standard_template_id"] == BUSYBOX_IMAGE and body["provisioned"] is False
    standard = [t for t in body["templates"] if t["standard"]]
    assert standard and BUSYBOX_IMAGE in (standard[0]["id"], standard[0]["name"])
    ensure = admin_api.post(f"{BASE}/templates/query",
                            json={"config_id": data["id"], "ensure_standard": True})
    assert ensure.status_code == 400  # Docker has no template catalog to provision
