"""The same install contract on E2B and Cube, through the real `e2b` SDK against the local
fake provider (tests/fakes/e2b_server.py): snapshots through the provider's API."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import SandboxConfig, SkillSnapshot
from app.services.sandboxes.provider import backend_for
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID
from tests.installs.conftest import CONFIGS, install_zip, open_session, run, skill_zip, wait_for
from tests.jobs.helpers import wait_for_terminal

# Configs here point at loopback fakes: the operator allows private endpoints.
pytestmark = pytest.mark.usefixtures("private_endpoints")


@pytest.fixture(params=["e2b", "cube"])
def provider(request, engine):
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer(request.param, image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}i{request.param}").start()
    yield request.param, server
    server.stop()


def test_install_run_and_uninstall_on_a_remote_provider(world, provider):
    kind, server = provider
    admin, member = world["admin"], world["member"]
    settings = server.settings()
    allow_private = settings.pop("allow_private_endpoints")
    config = admin.post(CONFIGS, json={"name": kind, "config": {
        "sandbox_type": kind, "allow_private_endpoints": allow_private, kind: settings}}).json
    assert "data" in config, config
    config_id = config["data"]["id"]
    data = skill_zip("remote", {"install.sh": b"#!/bin/sh\necho remote-built > built.txt\n"})
    skill_id = install_zip(admin, config_id, data).json["data"]["skill_id"]

    row = wait_for(skill_id)
    assert row.status == "ready", row.error
    snapshot_id = db.session.get(SandboxConfig, config_id).config["skill_image"]["snapshot_id"]
    assert snapshot_id in server.templates and server.templates[snapshot_id]["snapshot"]
    (ledger,) = db.session.scalars(select(SkillSnapshot)).all()
    assert server.templates[snapshot_id]["names"] == [ledger.planned_name]
    maintenance = [c for c in server.creates
                   if c.body["metadata"].get("sandlot_purpose") == "install"]
    assert len(maintenance) == 1
    remote = backend_for(db.session.get(SandboxConfig, config_id).config)
    assert remote.list({"sandlot_purpose": "install"}) == []  # the maintenance box is gone
    remote.close()

    session_id = open_session(member, config_id)
    out = run(member, session_id, "cat built.txt", skill="remote")
    assert out["stdout"] == "remote-built\n", out
    session_create = server.creates[-1].body
    assert session_create["templateID"] == snapshot_id  # booted from the skill snapshot
    ended = member.delete(f"/api/v1/sessions/{session_id}")
    assert ended.status_code == 200
    assert wait_for_terminal(ended.json["data"]["job_id"]).result == {"outcome": "removed"}

    assert admin.delete(f"{CONFIGS}/{config_id}/skills/{skill_id}").status_code == 202
    wait_for(skill_id, gone=True)
    image = db.session.get(SandboxConfig, config_id).config["skill_image"]
    assert image["snapshot_id"] is None
    db.session.remove()
    assert db.session.scalar(select(SkillSnapshot.state)) == "superseded"
