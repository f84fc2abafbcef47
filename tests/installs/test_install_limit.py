"""Issue 11 item 5: an install's commands together end before the job's time limit.

Each command may run SKILL_INSTALL_COMMAND_TIMEOUT (at most 600 s), but a plan is not
limited in its number of commands: the run caps every command at what is left of the
job's limit (less a margin for the image commit), so the job's own blocking calls end
before the dispatcher's limit, which matters in process, where a thread cannot be killed.
"""

from __future__ import annotations

import time
from contextlib import closing

import docker
import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import SkillSnapshot
from app.services import job_limits
from app.services.skills.installs import run as install_run
from tests import snapshot_guard
from tests.backends.conftest import DOCKER_HOST
from tests.installs.conftest import docker_config, install_zip, skill_zip, wait_for


@pytest.mark.parametrize("bound", ["job", "deployment"])
def test_an_install_stops_its_commands_at_the_first_limit(world, app, monkeypatch, bound):
    """The job's limit less the commit's margin, or the deployment's budget for the
    commands (issue 22 item 2: one install could hold its maintenance sandbox an hour)."""
    monkeypatch.setitem(app.config, "SKILL_INSTALL_COMMAND_TIMEOUT", 600)
    if bound == "job":
        monkeypatch.setitem(job_limits.LIMITS, "install_skill",
                            install_run.COMMANDS_MARGIN_SEC + 3)
    else:
        monkeypatch.setitem(app.config, "SKILL_INSTALL_COMMANDS_SEC", 3)
    admin = world["admin"]
    config = docker_config(admin)
    script = b"#!/bin/sh\necho started\nsleep 600\n"
    started = time.monotonic()

    skill_id = install_zip(admin, config["id"], skill_zip("slow", {"install.sh": script})
                           ).json["data"]["skill_id"]
    row = wait_for(skill_id)

    assert time.monotonic() - started < 60
    assert (row.status, row.error) == (
        "failed", "The install's commands used up the 3 s this deployment gives them "
                  "together, before they finished.")


def test_an_install_that_adds_too_much_fails_naming_the_size_and_leaves_nothing(
        world, app, monkeypatch):
    """Issue 22 item 2: an install.sh that wrote 2 GiB ended `ready` and its 2.3 GB
    snapshot stayed on the host. What one install may add to the image is capped, and a
    workspace's skill images together have a quota; past either the commit is refused."""
    monkeypatch.setitem(app.config, "SKILL_IMAGE_ADD_MAX_MB", 16)
    admin = world["admin"]
    config = docker_config(admin)
    big = b"#!/bin/sh\nhead -c 40000000 /dev/zero > filler.bin\n"
    skill_id = install_zip(admin, config["id"], skill_zip("filler", {"install.sh": big})
                           ).json["data"]["skill_id"]
    row = wait_for(skill_id)
    assert row.status == "failed"
    assert "added 40 MB to the image" in row.error and "limit of 16 MB" in row.error, row.error
    assert db.session.scalars(select(SkillSnapshot)).all() == []
    with closing(docker.DockerClient(base_url=DOCKER_HOST, timeout=60)) as client:
        assert snapshot_guard.leftover_snapshots(client, {config["id"]}) == []

    # Under the per-install cap, but past the workspace's quota of skill image bytes.
    monkeypatch.setitem(app.config, "SKILL_IMAGE_ADD_MAX_MB", 64)
    monkeypatch.setitem(app.config, "QUOTA_SKILL_IMAGE_MB_PER_WORKSPACE", 60)
    first = install_zip(admin, config["id"], skill_zip("filler", {"install.sh": big})
                        ).json["data"]["skill_id"]
    assert wait_for(first).status == "ready"
    [kept] = db.session.scalars(select(SkillSnapshot)).all()
    assert 39_000_000 < kept.size_bytes < 42_000_000
    second = install_zip(admin, config["id"], skill_zip("filler-two", {"install.sh": big})
                         ).json["data"]["skill_id"]
    row = wait_for(second)
    assert row.status == "failed"
    assert "quota of 60 MB of skill images per workspace" in row.error, row.error
