"""Runs against the real Docker engine: a docker config, a member's session, helpers to
start a command and wait for its run to end (every test waits for what it starts)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.factories import config_doc

CONFIGS = "/api/v1/sandbox-configs"


@pytest.fixture(autouse=True)
def _engine():
    require_docker()


@dataclass
class World:
    a: object
    b: object
    config: dict
    member: object
    session_id: str

    def url(self, tail: str = "") -> str:
        return f"/api/v1/sessions/{self.session_id}{tail}"


def docker_config(admin, name: str = "local", **doc) -> dict:
    response = admin.post(CONFIGS, json={"name": name, "config": config_doc(
        "docker", {"image": BASE_IMAGE, "network_mode": "none"},
        **{"env_vars": {"GREETING": "hello-from-config"}, **doc})})
    assert response.status_code == 201, response.json
    return response.json["data"]


def open_session(api, config_id: str) -> str:
    response = api.post("/api/v1/sessions", json={"sandbox_config_id": config_id, "title": "t"})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


@pytest.fixture
def world(two_tenants, bearer) -> World:
    a, b = two_tenants
    config = docker_config(bearer(a.admin, a.tenant))
    member = bearer(a.contributor, a.tenant)
    return World(a, b, config, member, open_session(member, config["id"]))


@pytest.fixture
def short_wait(app, monkeypatch):
    """POST exec answers 202 after 0.3 s instead of 10 s."""
    monkeypatch.setitem(app.config, "RUN_SYNC_WAIT_SECONDS", 0.3)


def wait_run(api, world: World, run_id: str, seconds: float = 60,
             until=lambda run: run["status"] != "running") -> dict:
    deadline = time.monotonic() + seconds
    while True:
        run = api.get(world.url(f"/runs/{run_id}")).json["data"]
        if until(run) or time.monotonic() > deadline:
            return run
        time.sleep(0.1)


# The install streams' live-server fixtures, for runs' event streams.
from tests.streams.conftest import _hang_up_streams, redis_url, serve  # noqa: E402,F401


def finished(api, world: World, response) -> dict:
    """The stored run of an exec answer, once it ended (200 or 202 alike)."""
    data = response.json["data"]
    return wait_run(api, world, data.get("run_id") or data["id"])
