"""A `kill -9` of a real `flask worker` mid-install on Redis ends the row `failed`, frees
the image lock and deletes the orphaned maintenance sandbox (reference 7.2: reaper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from app.extensions import db
from app.jobs.queue import queue_name
from app.models import InstalledSkill, Job, JobStatus, SkillInstallEvent
from app.services import jobs as job_service
from app.services.skills.installs import control, lock
from tests.installs.conftest import docker_config, install_zip, skill_zip, wait_for
from tests.jobs.conftest import api, make_app, redis_url  # noqa: F401  (fixtures)
from tests.jobs.helpers import delete_queue

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rq_installs(make_app, redis_url, bundle_dir):  # noqa: F811 (fixtures)
    app = make_app(REDIS_URL=redis_url, JOB_QUEUE=f"sandlot-test-{uuid.uuid4().hex[:12]}",
                   SKILL_BUNDLE_DIR=str(bundle_dir), SKILL_BUNDLE_STORE="")
    yield app
    delete_queue(app)


def start_worker(app, db_url: str, bundle_dir) -> subprocess.Popen:
    env = {**os.environ, "FLASK_APP": "tests.installs.worker_app:make_app()",
           "PYTHONPATH": str(ROOT), "SANDLOT_TEST_DATABASE_URL": db_url,
           "SANDLOT_TEST_REDIS_URL": app.config["REDIS_URL"],
           "SANDLOT_TEST_JOB_QUEUE": queue_name(app), "SANDLOT_TEST_BUNDLE_DIR": str(bundle_dir)}
    flask = Path(sys.executable).with_name("flask")
    return subprocess.Popen([str(flask), "worker"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_kill_9_of_the_worker_mid_install_ends_failed_and_frees_the_lock(
        rq_installs, api, two_tenants, db_url, bundle_dir, engine, fast):  # noqa: F811
    a, _ = two_tenants
    admin = api(rq_installs, a.admin, a.tenant)
    config = docker_config(admin)
    data = skill_zip("doomed", {"install.sh": b"#!/bin/sh\necho working\nsleep 300\n"})
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]
    worker = start_worker(rq_installs, db_url, bundle_dir)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # the install command is running in the worker
            db.session.remove()
            if db.session.scalar(select(SkillInstallEvent).where(
                    SkillInstallEvent.skill_id == skill_id, SkillInstallEvent.kind == "command")):
                break
            time.sleep(0.3)
        else:
            pytest.fail("the worker never started the install command")
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)

    db.session.remove()
    row = db.session.get(InstalledSkill, skill_id)
    assert row.status == "installing"  # nobody is left to say otherwise...
    run_id = row.install_message_id
    with rq_installs.app_context():
        held = lock.ImageLock(a.tenant.id, config["id"], "someone-else")
        assert held.try_acquire() is False  # ...and the dead run still holds the lock
        time.sleep(2)
        assert job_service.reap(heartbeat_grace=1) == 1  # the reaper's job pass
        assert control.reap() == 1  # and its skill pass
        db.session.remove()
        assert held.try_acquire() is True  # the lock is free again
        held.release()
    row = wait_for(skill_id, deadline_sec=10)
    assert row.status == "failed"
    assert row.error == "The install did not finish: its worker stopped."
    assert db.session.get(Job, row.job_id).status == JobStatus.errored
    assert engine.list({"sandlot_session_id": f"run-{run_id}"}) == []
