"""Runs on E2B and Cube, through the real SDK against the local fake provider (which
runs the command in a real container and speaks envd's SendSignal): output arrives
while the command runs, and cancel kills the command's process group."""

from __future__ import annotations

import pytest

from tests.api.test_sessions_remote import provider  # noqa: F401 - the fixture
from tests.factories import config_doc
from tests.runs.conftest import World, finished, wait_run

pytestmark = pytest.mark.usefixtures("private_endpoints")


@pytest.fixture
def remote(two_tenants, bearer, provider) -> World:  # noqa: F811
    kind, server = provider
    a, b = two_tenants
    admin = bearer(a.admin, a.tenant)
    settings = server.settings()
    allow_private = settings.pop("allow_private_endpoints")
    config = admin.post("/api/v1/sandbox-configs", json={"name": kind, "config": config_doc(
        kind, settings, allow_private_endpoints=allow_private)}).json
    assert "data" in config, config
    member = bearer(a.contributor, a.tenant)
    session = member.post("/api/v1/sessions", json={"sandbox_config_id": config["data"]["id"]})
    return World(a, b, config["data"], member, session.json["data"]["id"])


def test_a_remote_run_streams_and_is_cancelled(remote, short_wait):
    run = remote.member.post(remote.url("/exec"), json={
        "command": "echo started; sleep 60 & sleep 60; echo never"}).json["data"]
    live = wait_run(remote.member, remote, run["id"], 30,
                    until=lambda r: "started" in r["stdout"])
    assert live["status"] == "running", live
    assert remote.member.post(remote.url(f"/runs/{run['id']}/cancel")).status_code == 202
    done = wait_run(remote.member, remote, run["id"], 20)
    assert done["status"] == "cancelled" and "never" not in done["stdout"], done
    after = remote.member.post(remote.url("/exec"), json={"command": "echo usable"})
    assert finished(remote.member, remote, after)["stdout"] == "usable\n"


def test_a_remote_run_says_how_many_files_it_left_in_workspace_output(remote):
    wrote = remote.member.post(remote.url("/exec"), json={
        "command": "mkdir -p /workspace/output && echo a > /workspace/output/r.txt"})
    done = finished(remote.member, remote, wrote)
    assert done["exit_code"] == 0, done
    assert remote.member.get(remote.url(f"/runs/{wrote.json['data']['run_id']}"))\
        .json["data"]["new_output_files"] == 1
