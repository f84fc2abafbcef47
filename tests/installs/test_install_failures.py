"""Installs that fail, hang or fill the disk end `failed` with a readable error; nothing
half-built stays, and an upgrade that fails leaves the previous build serving."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import AuditEvent, SandboxConfig, SkillInstallEvent, SkillSnapshot
from tests.installs.conftest import (
    docker_config,
    install_zip,
    open_session,
    run,
    skill_zip,
    wait_for,
)

GOOD = b"#!/bin/sh\necho v1 > version.txt\n"


@pytest.mark.parametrize(("script", "expected"), [
    (b"#!/bin/sh\necho 'fatal: no compiler here' >&2\nexit 3\n",
     "`./install.sh` failed with exit code 3: fatal: no compiler here"),
    (b"#!/bin/sh\necho started\nsleep 600\n",
     "`./install.sh` did not finish within 2 s and was stopped."),
    # /dev/full answers every write with ENOSPC, the error a full disk gives (a disk
    # filled for real: test_install_contained.py).
    (b"#!/bin/sh\nhead -c 1048576 /dev/zero > /dev/full\n",
     "The sandbox ran out of disk space while running `./install.sh` (this deployment "
     "gives an install 4096 MB)."),
    # The plan for package.json is `npm install`; the base image has no npm.
    (None, "`npm install --no-audit --no-fund` failed with exit code 127: "
           "sh: 1: npm: not found"),
], ids=["fails", "hangs", "disk-full", "no-npm"])
def test_a_bad_install_ends_failed_cleanly(world, app, monkeypatch, script, expected):
    monkeypatch.setitem(app.config, "SKILL_INSTALL_COMMAND_TIMEOUT", 2)
    admin, engine = world["admin"], world["engine"]
    config = docker_config(admin)
    files = {"install.sh": script} if script else {"package.json": b'{"name": "bad"}'}
    skill_id = install_zip(admin, config["id"], skill_zip("bad", files)).json["data"]["skill_id"]

    row = wait_for(skill_id)
    assert (row.status, row.error) == ("failed", expected)
    view = admin.get(f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}").json["data"]
    assert view["status"] == "failed" and view["error"] == expected
    assert engine.list({"sandlot_sandbox_config_id": config["id"]}) == []  # sandbox deleted
    assert db.session.scalars(select(SkillSnapshot)).all() == []  # nothing was built
    assert "skill_image" not in (db.session.get(SandboxConfig, config["id"]).config or {}) or \
        not db.session.get(SandboxConfig, config["id"]).config["skill_image"]
    last = db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.skill_id == skill_id).order_by(SkillInstallEvent.id.desc())).first()
    assert (last.stage, last.percent, last.status, last.message) == (
        "failed", 100, "failed", expected)
    assert db.session.scalars(select(AuditEvent.action).where(
        AuditEvent.object_id == skill_id).order_by(AuditEvent.id)).all()[-1] == \
        "installed_skill.install_failed"


def test_a_failed_upgrade_keeps_the_previous_build_serving(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin)
    first = install_zip(admin, config["id"], skill_zip("upg", {"install.sh": GOOD}))
    skill_id = first.json["data"]["skill_id"]
    assert wait_for(skill_id).status == "ready"
    image = db.session.get(SandboxConfig, config["id"]).config["skill_image"]

    broken = skill_zip("upg", {"install.sh": b"#!/bin/sh\nexit 1\n"}, version="2.0.0")
    again = install_zip(admin, config["id"], broken)
    assert again.status_code == 202 and again.json["data"]["skill_id"] == skill_id  # same row
    row = wait_for(skill_id)
    assert row.status == "failed" and row.version == "2.0.0"
    view = admin.get(f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}").json["data"]
    assert view["served"] == {"version": "1.0.0"}
    assert db.session.get(SandboxConfig, config["id"]).config["skill_image"] == image
    session_id = open_session(member, config["id"])
    out = run(member, session_id, "cat version.txt", skill="upg")
    assert out["stdout"] == "v1\n"
