"""The per-config image lock (database lease and Redis lease), the run heartbeat, and
snapshot retention (reference 1.8, 7.2)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app.extensions import db
from app.models import InstalledSkill, SkillImageLease, SkillSnapshot
from app.models.types import utcnow
from app.services.sandboxes import image
from app.services.skills.installs import lock
from tests.installs.conftest import docker_config, install_zip, skill_zip, wait_for
from tests.jobs.conftest import redis_url  # noqa: F401  (fixture)


@pytest.fixture(params=["database", "redis"])
def lock_backend(request, app, monkeypatch):
    if request.param == "redis":
        monkeypatch.setitem(app.config, "REDIS_URL", request.getfixturevalue("redis_url"))
    else:
        monkeypatch.setitem(app.config, "REDIS_URL", None)
    return request.param


def test_one_holder_at_a_time_and_only_the_holder_frees_it(lock_backend, two_tenants):
    tenant_id = two_tenants[0].tenant.id
    config = f"cfg-{time.monotonic_ns()}"
    first, second = (lock.ImageLock(tenant_id, config, name) for name in ("run-1", "run-2"))
    assert first.try_acquire() is True
    assert second.try_acquire() is False
    second.release()  # not the holder: nothing happens
    assert second.try_acquire() is False
    assert first.renew() is True and second.renew() is False
    first.release()
    assert second.try_acquire() is True
    second.release()


def test_a_lease_that_stopped_renewing_can_be_taken_over(lock_backend, two_tenants):
    tenant_id = two_tenants[0].tenant.id
    config = f"cfg-{time.monotonic_ns()}"
    dead, alive = lock.ImageLock(tenant_id, config, "dead"), lock.ImageLock(tenant_id, config,
                                                                            "alive")
    assert dead.try_acquire()
    if lock_backend == "redis":
        dead._redis.pexpire(dead.key, 1)
        time.sleep(0.05)
    else:
        db.session.execute(update(SkillImageLease).values(
            expires_at=utcnow() - timedelta(seconds=1)))
        db.session.commit()
    assert alive.try_acquire() is True
    assert dead.renew() is False  # the dead run cannot get it back
    alive.release()


def test_the_row_heartbeat_moves_while_a_run_is_busy(world):
    admin = world["admin"]
    config = docker_config(admin)
    data = skill_zip("beating", {"install.sh": b"#!/bin/sh\nsleep 5\n"})
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]
    seen = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        db.session.remove()
        row = db.session.get(InstalledSkill, skill_id)
        if row.status != "installing":
            break
        seen.add(row.installing_since)
        time.sleep(0.3)
    assert wait_for(skill_id).status == "ready"
    assert len(seen - {None}) >= 3  # refreshed every second here (every 30 s by default)


def test_superseded_snapshots_are_swept_after_retention(world):
    """Reference 1.8: a superseded snapshot goes after its retention. It went only when the
    same config next installed (issue 22 item 8); the reaper's sweep now releases it."""
    admin, engine = world["admin"], world["engine"]
    config = docker_config(admin)
    for name in ("first", "second"):
        skill_id = install_zip(admin, config["id"], skill_zip(name, {
            "install.sh": b"#!/bin/sh\ntrue\n"})).json["data"]["skill_id"]
        assert wait_for(skill_id).status == "ready"
    old, new = db.session.scalars(select(SkillSnapshot).order_by(SkillSnapshot.generation))
    assert (old.state, new.state) == ("superseded", "active")
    from app.models import SandboxConfig

    row = db.session.get(SandboxConfig, config["id"])
    assert image.sweep_expired() == 0  # within retention: kept
    assert engine.api.images(name=old.snapshot_id)
    past = image.retention(row.config) + timedelta(minutes=1)
    old.superseded_at = old.superseded_at - past
    db.session.commit()
    assert image.sweep_expired() == 1
    db.session.refresh(old)
    assert old.state == "deleted" and not engine.api.images(name=old.snapshot_id)
    assert engine.api.images(name=new.snapshot_id)
    assert image.sweep_expired() == 0
