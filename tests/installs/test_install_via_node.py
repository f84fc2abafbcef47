"""A skill installed from a host that owns no Docker engine (issue 28 item 2): the
install's sandbox, its commands, the packed skill directory and the snapshot are all
made by the engine's node; the packed file is discarded on the node's host, and the
member's session then runs the skill through the node as well."""

from __future__ import annotations

import glob
import os
import tempfile

import pytest

from tests.installs.conftest import (
    docker_config,
    install_zip,
    open_session,
    run,
    skill_zip,
    wait_for,
)
from tests.nodes import RunningNode, own_no_engine


@pytest.fixture
def node(app, monkeypatch):
    own_no_engine(app, monkeypatch)
    running = RunningNode(app)
    yield running
    running.stop()


def _packed() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "sandlot-carry-*.tar")))


def test_an_install_from_a_host_without_the_engine_runs_on_its_node(node, world):
    admin, member = world["admin"], world["member"]
    before = _packed()
    config = docker_config(admin)
    response = install_zip(admin, config["id"], skill_zip("via-node", {
        "install.sh": b"#!/bin/sh\nprintf 'echo hello from the node\\n' > run.sh\n"}))
    assert response.status_code == 202, response.json
    row = wait_for(response.json["data"]["skill_id"])
    assert row.status == "ready", row.error
    assert _packed() == before  # discarded where it was packed

    session_id = open_session(member, config["id"])
    out = run(member, session_id, "sh /opt/weknora/tenant/skills/via-node/run.sh")
    assert out["stdout"] == "hello from the node\n", out
