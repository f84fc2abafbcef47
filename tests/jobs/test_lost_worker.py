"""Issue 28 item 4: a worker killed outright (`kill -9`) mid-job.

The reaper fails the dead job's row and, in the same pass, frees its workspace's
fair-share slot, so the workspace's next waiting job runs at once (not when the slot's
score expires, the job's limit plus a grace later). The share counts only workers whose
heartbeat is live: a killed worker stays registered in Redis until its key expires.
RQ's own cleanup of the dead job, whenever it comes, changes nothing more.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest
from rq import Worker

from app.models import JobStatus
from app.services import jobs as job_service
from tests.jobs.helpers import (
    delete_queue,
    fresh_row,
    rq_connection,
    rq_job,
    wait_for_workers,
)

BEAT = 1  # JOB_HEARTBEAT_SECONDS of the app and its workers: a dead one shows in seconds
GRACE = 1  # the reaper's heartbeat grace in these tests (the default is 75 s)


@pytest.fixture
def beat_app(make_app, redis_url):
    """An RQ app on a queue of its own, its workers beating every BEAT seconds."""
    app = make_app(REDIS_URL=redis_url, JOB_QUEUE=f"sandlot-test-{uuid.uuid4().hex[:12]}",
                   JOB_HEARTBEAT_SECONDS=BEAT)
    yield app
    delete_queue(app)


def start_workers(app, worker_processes, count: int) -> list[subprocess.Popen]:
    workers = [worker_processes(app, JOB_HEARTBEAT_SECONDS=str(BEAT)) for _ in range(count)]
    wait_for_workers(app, count)
    return workers


def worker_of(app, job_id: str, workers: list[subprocess.Popen]) -> subprocess.Popen:
    """The `flask worker` process whose RQ worker took the job."""
    deadline = time.monotonic() + 10
    while not (name := rq_job(app, job_id).worker_name):
        assert time.monotonic() < deadline, f"no worker took job {job_id}"
        time.sleep(0.05)
    worker = Worker.find_by_key(f"{Worker.redis_worker_namespace_prefix}{name}",
                                connection=rq_connection(app))
    return next(process for process in workers if process.pid == worker.pid)


def kill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def slots(app, tenant_id: int) -> set[str]:
    """The jobs holding the tenant's fair-share slots."""
    fair = app.extensions["sandlot_dispatcher"].fair
    key = fair._keys(tenant_id)[0]
    return {member.decode() for member in fair.connection.zrange(key, 0, -1)}


def test_the_share_counts_only_workers_whose_heartbeat_is_live(
        beat_app, two_tenants, worker_processes):
    a, _ = two_tenants
    dispatcher = beat_app.extensions["sandlot_dispatcher"]
    workers = start_workers(beat_app, worker_processes, 3)
    assert dispatcher.share() == 2  # one less than three live workers
    with beat_app.app_context():  # a run far longer than a heartbeat window
        busy = job_service.enqueue("tests.sleep", tenant_id=a.tenant.id, actor_id=None,
                                   params={"seconds": 8 * BEAT}).id
    runner = worker_of(beat_app, busy, workers)
    idle = next(process for process in workers if process is not runner)

    kill(idle)
    deadline = time.monotonic() + 10
    while dispatcher.share() != 1:
        assert time.monotonic() < deadline, "the killed worker still counts for the share"
        time.sleep(0.1)
    time.sleep(4 * BEAT)  # past the live window: the idle and the busy survivors still beat

    assert dispatcher.live_workers() == 2
    assert dispatcher.share() == 1
    assert Worker.count(queue=dispatcher.queue) == 3  # the dead one is still registered
    assert fresh_row(busy).status == JobStatus.running
