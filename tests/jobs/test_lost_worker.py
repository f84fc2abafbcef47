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
from rq.job import JobStatus as RQStatus

from app.models import JobStatus
from app.services import jobs as job_service
from tests.jobs.helpers import (
    delete_queue,
    fresh_row,
    rq_connection,
    rq_job,
    wait_for_terminal,
    wait_for_workers,
    wait_running,
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


def test_the_reaper_frees_a_killed_workers_slot_and_the_next_job_runs(
        beat_app, two_tenants, worker_processes):
    a, _ = two_tenants
    dispatcher = beat_app.extensions["sandlot_dispatcher"]
    workers = start_workers(beat_app, worker_processes, 2)
    with beat_app.app_context():
        hung = job_service.enqueue("tests.sleep", tenant_id=a.tenant.id, actor_id=None,
                                   params={"seconds": 120}).id
        wait_running(hung)
        waiting = job_service.enqueue("tests.count", tenant_id=a.tenant.id, actor_id=None).id
    assert dispatcher.share() == 1
    assert dispatcher.queue.count == 0  # it waits for the tenant's slot, not on the queue
    assert slots(beat_app, a.tenant.id) == {hung}

    kill(worker_of(beat_app, hung, workers))
    time.sleep(GRACE + 0.5)  # the dead job's last heartbeat is now older than the grace
    started = time.monotonic()
    with beat_app.app_context():
        assert job_service.reap(GRACE) == 1

    row = fresh_row(hung)
    assert row.status == JobStatus.errored
    assert row.error == f"The worker went silent (no heartbeat for {GRACE} s)."
    # The same pass freed the slot: the waiting job ran on the live worker at once.
    assert wait_for_terminal(waiting, seconds=30).status == JobStatus.succeeded
    assert time.monotonic() - started < 30
    assert slots(beat_app, a.tenant.id) == set()

    # RQ's own cleanup of the dead job comes later: its entry in the started registry
    # expires at its timeout (600 s) + 60 s. Run it as of then, with another of the
    # tenant's jobs holding the slot (its own entry expires far later) and one waiting:
    # the failure callback's release must admit nothing.
    assert fresh_row(hung).timeout_sec == 600
    with beat_app.app_context():
        holder = job_service.enqueue("tests.sleep", tenant_id=a.tenant.id, actor_id=None,
                                     params={"seconds": 5}, timeout_sec=3000).id
        wait_running(holder)
        last = job_service.enqueue("tests.count", tenant_id=a.tenant.id, actor_id=None).id
        dispatcher.queue.started_job_registry.cleanup(timestamp=time.time() + 700)

    assert rq_job(beat_app, hung).get_status() == RQStatus.FAILED  # not requeued
    assert hung in dispatcher.queue.failed_job_registry.get_job_ids()
    assert fresh_row(hung).error == row.error  # the row keeps its first outcome
    assert fresh_row(last).status == JobStatus.pending
    assert dispatcher.queue.count == 0
    assert slots(beat_app, a.tenant.id) == {holder}
    assert wait_for_terminal(holder, seconds=30).status == JobStatus.succeeded
    assert wait_for_terminal(last, seconds=30).status == JobStatus.succeeded
    assert dispatcher.queue.count == 0  # each ran once; nothing is left to run


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


def test_rqs_failure_callback_for_a_lost_worker_frees_the_slot_too(rq_app, two_tenants):
    """Should RQ's cleanup find the dead job before any reaper pass, its failure callback
    (what RQ calls with AbandonedJobError) ends the row and frees the slot."""
    from rq.exceptions import AbandonedJobError

    from app.jobs.queue import mark_errored

    a, _ = two_tenants
    dispatcher = rq_app.extensions["sandlot_dispatcher"]
    assert dispatcher.share() == 1  # no live workers: the least share
    with rq_app.app_context():
        lost = job_service.enqueue("tests.count", tenant_id=a.tenant.id, actor_id=None).id
        waiting = job_service.enqueue("tests.count", tenant_id=a.tenant.id, actor_id=None).id
        assert job_service.claim(lost)  # its worker took it, then died
        assert dispatcher.queue.get_job_ids() == [lost]

        mark_errored(rq_job(rq_app, lost), dispatcher.queue.connection, AbandonedJobError)

    row = fresh_row(lost)
    assert row.status == JobStatus.errored
    assert row.error == "The worker running this job was lost."
    assert dispatcher.queue.get_job_ids() == [lost, waiting]
    assert slots(rq_app, a.tenant.id) == {waiting}


def test_releasing_a_slot_twice_admits_a_waiting_job_once(redis_url):
    """The reaper and RQ's failure callback may both release a dead job's slot."""
    from redis import Redis

    from app.jobs.fair_rq import FairShare

    connection = Redis.from_url(redis_url)
    queue = f"sandlot-test-fair-{uuid.uuid4().hex[:8]}"
    fair = FairShare(connection, queue, lambda: 1)
    enqueued: list[tuple[str, int, int]] = []
    try:
        assert fair.admit("dead", 60, tenant_id=1) is True
        assert fair.admit("next", 60, tenant_id=1) is False
        assert fair.admit("last", 60, tenant_id=1) is False

        for _ in range(3):  # the reaper, the failure callback, the reaper's next pass
            fair.release("dead", 1, lambda *job: enqueued.append(job))
        fair.promote_all(lambda *job: enqueued.append(job))

        assert enqueued == [("next", 60, 1)]
        fair.release("next", 1, lambda *job: enqueued.append(job))
        assert enqueued == [("next", 60, 1), ("last", 60, 1)]
    finally:
        for key in connection.scan_iter(f"sandlot:fair:{queue}:*"):
            connection.delete(key)
