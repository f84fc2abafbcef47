"""Issue 11 item 5: one tenant cannot stall everyone's jobs.

Tenant A starts two sandbox checks against a Docker engine that accepts connections and
never answers (each would hold a worker for its whole HTTP timeout); tenant B's job must
still start within seconds, on the in-process pool of 2 and on RQ with 2 real workers.
A job past its kind's time limit ends `failed` with the reason, and its slot is freed.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time

import pytest

from app.jobs.registry import KINDS
from app.models import JobStatus
from app.services import job_limits
from app.services import jobs as job_service
from app.services.sandboxes.check import job as sandbox_check
from tests.backends.conftest import require_docker
from tests.jobs.helpers import (
    fresh_row,
    stop_worker,
    wait_for_terminal,
    wait_for_workers,
    wait_running,
)

HUNG_TIMEOUT = 25  # the hung checks' HTTP timeout: far longer than "within seconds"
PROMPT = 5.0  # how soon tenant B's job must have run


class SilentEngine:
    """A unix socket that accepts connections and never answers: a hung Docker engine."""

    def __init__(self) -> None:
        self.path = os.path.join(tempfile.mkdtemp(prefix="sandlot-fair-"), "docker.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        """Hang up: the clients waiting on it fail at once, so the hung checks end. (Shut
        the listener down first: a close alone leaves it listening while `accept` blocks.)"""
        try:
            self.server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.server.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent():
    engine = SilentEngine()
    yield engine
    engine.close()


def engines(silent: SilentEngine) -> str:
    return json.dumps({"local": {"url": "unix:///var/run/docker.sock"},
                       "silent": {"url": f"unix://{silent.path}"}})


def hung_check(app, group) -> str:
    """A shallow check of an unsaved config on the silent engine; its job id."""
    doc = {"sandbox_type": "docker",
           "docker": {"engine": "silent", "http_timeout_sec": HUNG_TIMEOUT}}
    with app.app_context():
        return sandbox_check.start(group.tenant.id, group.admin.id, None, doc, deep=False).id


def assert_b_was_not_delayed(app, a_jobs: list[str], b_group) -> None:
    """With A's first check hung on a worker, B's job runs within PROMPT seconds while
    A's second check waits for A's own slot."""
    wait_running(a_jobs[0])
    time.sleep(0.5)  # give the second hung check every chance to take the other worker
    started = time.monotonic()
    with app.app_context():
        b_job = job_service.enqueue("audit_export", tenant_id=b_group.tenant.id,
                                    actor_id=b_group.admin.id).id
    row = wait_for_terminal(b_job, seconds=PROMPT + 10)
    waited = time.monotonic() - started
    assert row.status == JobStatus.succeeded, row.error
    assert waited < PROMPT, f"tenant B's job took {waited:.1f} s behind tenant A's hung checks"
    statuses = {fresh_row(job_id).status for job_id in a_jobs}
    assert statuses == {JobStatus.running, JobStatus.pending}, statuses


def test_a_tenants_hung_checks_do_not_delay_another_tenants_job_in_process(
        make_app, two_tenants, silent):
    require_docker()
    a, b = two_tenants
    app = make_app(INPROCESS_WORKERS=2, SANDBOX_DOCKER_ENGINES=engines(silent))
    a_jobs = [hung_check(app, a), hung_check(app, a)]

    assert_b_was_not_delayed(app, a_jobs, b)

    silent.close()
    for job_id in a_jobs:  # both end, the second after the first freed A's slot
        row = wait_for_terminal(job_id, seconds=30)
        assert row.status == JobStatus.succeeded, row.error
        assert row.result["checks"][0]["ok"] is False  # the control plane did not answer


def test_a_tenants_hung_checks_do_not_delay_another_tenants_job_on_rq(
        rq_app, two_tenants, silent, worker_processes):
    require_docker()
    a, b = two_tenants
    rq_app.config["SANDBOX_DOCKER_ENGINES"] = engines(silent)
    workers = [worker_processes(rq_app, DOCKER_ENGINES=engines(silent)) for _ in range(2)]
    try:
        wait_for_workers(rq_app, 2)
        a_jobs = [hung_check(rq_app, a), hung_check(rq_app, a)]

        assert_b_was_not_delayed(rq_app, a_jobs, b)

        silent.close()
        for job_id in a_jobs:
            row = wait_for_terminal(job_id, seconds=40)
            assert row.status == JobStatus.succeeded, row.error
    finally:
        for worker in workers:
            stop_worker(worker)


def test_a_job_past_its_limit_ends_failed_and_frees_its_slot_in_process(
        make_app, two_tenants):
    a, b = two_tenants
    app = make_app(INPROCESS_WORKERS=1)
    with app.app_context():
        stuck = job_service.enqueue("tests.sleep", tenant_id=a.tenant.id, actor_id=None,
                                    params={"seconds": 5}, timeout_sec=1).id
        after = job_service.enqueue("tests.count", tenant_id=b.tenant.id, actor_id=None).id
    started = time.monotonic()

    row = wait_for_terminal(stuck, seconds=5)
    assert row.status == JobStatus.failed
    assert row.error == "Stopped at its time limit: this job may run for at most 1 s."
    # The only worker slot was freed at the limit: the next job ran while the stuck
    # thread still sleeps (it cannot be killed; it ends on its own).
    assert wait_for_terminal(after, seconds=5).status == JobStatus.succeeded
    assert time.monotonic() - started < 5


def test_a_tenant_at_its_share_waits_while_others_run_in_process(make_app, two_tenants):
    """The share itself: with 2 workers a tenant runs at most 1 job at a time."""
    from tests.jobs import kinds

    a, b = two_tenants
    app = make_app(INPROCESS_WORKERS=2)
    gate = kinds.GATES["fair"] = threading.Event()
    try:
        with app.app_context():
            first = job_service.enqueue("tests.block", tenant_id=a.tenant.id, actor_id=None,
                                        params={"gate": "fair"}).id
            second = job_service.enqueue("tests.count", tenant_id=a.tenant.id,
                                         actor_id=None).id
            other = job_service.enqueue("tests.count", tenant_id=b.tenant.id,
                                        actor_id=None).id
        assert wait_for_terminal(other).status == JobStatus.succeeded
        assert fresh_row(first).status == JobStatus.running
        assert fresh_row(second).status == JobStatus.pending
    finally:
        gate.set()
    assert wait_for_terminal(second).status == JobStatus.succeeded


def test_every_job_kind_has_its_own_limit(make_app, two_tenants):
    """A new kind must state how long its work may take; enqueue uses that limit."""
    real = {name for name in KINDS if not name.startswith("tests.")}
    assert real <= set(job_limits.LIMITS), real - set(job_limits.LIMITS)
    a, _ = two_tenants
    app = make_app(INPROCESS_WORKERS=1)
    with app.app_context():
        job_id = job_service.enqueue("audit_export", tenant_id=a.tenant.id, actor_id=None).id
    assert fresh_row(job_id).timeout_sec == job_limits.LIMITS["audit_export"]
    wait_for_terminal(job_id)


def test_a_removal_on_a_hung_provider_ends_within_its_budget(app, two_tenants, silent,
                                                             monkeypatch):
    """A config may give each provider call 600 s; a removal's calls together stop at
    REMOVAL_BUDGET_SEC (below the job's limit) and the removal is kept for a retry."""
    import uuid

    from app.extensions import db
    from app.models import SandboxConfig, SandboxRemoval
    from app.services.sessions import ending

    a, _ = two_tenants
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", engines(silent))
    monkeypatch.setattr(job_limits, "REMOVAL_BUDGET_SEC", 1)
    assert job_limits.REMOVAL_BUDGET_SEC < job_limits.LIMITS["remove_sandboxes"]
    config = SandboxConfig(id=str(uuid.uuid4()), tenant_id=a.tenant.id, name="hung",
                           sandbox_type="docker", config={
                               "sandbox_type": "docker",
                               "docker": {"engine": "silent", "http_timeout_sec": 600}})
    db.session.add(config)
    db.session.flush()
    removal = SandboxRemoval(tenant_id=a.tenant.id, sandbox_config_id=config.id,
                             session_id=str(uuid.uuid4()))
    db.session.add(removal)
    db.session.commit()
    started = time.monotonic()

    assert ending.remove(removal.id) == "retry"

    assert time.monotonic() - started < 5
    db.session.expire_all()
    assert db.session.get(SandboxRemoval, removal.id).attempts == 1


def test_ending_a_removed_members_sessions_stays_within_its_budget(app, two_tenants, silent,
                                                                   monkeypatch):
    """Each inline removal on a hung provider costs its budget; past the job's budget the
    rest are left, due, to the removal sweeper, so the job ends below its limit."""
    import uuid

    from sqlalchemy import select

    from app.extensions import db
    from app.models import SandboxConfig, SandboxRemoval, SandboxSession
    from app.services.identity import member_exit
    from tests.factories import make_user

    a, _ = two_tenants
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", engines(silent))
    monkeypatch.setattr(job_limits, "REMOVAL_BUDGET_SEC", 1.5)
    monkeypatch.setattr(job_limits, "MEMBER_EXIT_BUDGET_SEC", 1)
    gone = make_user(f"gone-{uuid.uuid4().hex[:6]}@example.test")  # no longer a member
    config = SandboxConfig(id=str(uuid.uuid4()), tenant_id=a.tenant.id, name="hung",
                           sandbox_type="docker", config={
                               "sandbox_type": "docker",
                               "docker": {"engine": "silent", "http_timeout_sec": 600}})
    db.session.add(config)
    db.session.flush()
    for _ in range(3):
        db.session.add(SandboxSession(id=str(uuid.uuid4()), tenant_id=a.tenant.id,
                                      user_id=gone.id, sandbox_config_id=config.id,
                                      sandbox_id="gone-sandbox"))
    db.session.commit()
    started = time.monotonic()

    outcome = member_exit.end_sessions(a.tenant.id, gone.id, lambda line: None)

    assert time.monotonic() - started < 5
    assert outcome == {"ended": 3, "unreachable": 1}
    db.session.expire_all()
    assert db.session.scalars(select(SandboxSession).where(
        SandboxSession.user_id == gone.id)).all() == []
    removals = db.session.scalars(select(SandboxRemoval).where(
        SandboxRemoval.sandbox_config_id == config.id)).all()
    assert sorted(r.attempts for r in removals) == [0, 0, 1]  # two left to the sweeper


def test_rq_share_counts_in_redis_and_a_lost_workers_slot_expires(redis_url):
    """The Redis counter: a tenant's second job waits while its first holds the slot,
    other tenants pass, and a slot whose worker died outright frees itself at the job's
    limit, when the reaper's pass admits the waiting job."""
    import uuid

    from redis import Redis

    from app.jobs import fair_rq

    connection = Redis.from_url(redis_url)
    queue = f"sandlot-test-fair-{uuid.uuid4().hex[:8]}"
    fair = fair_rq.FairShare(connection, queue, lambda: 1)
    enqueued: list[tuple[str, int, int]] = []
    try:
        assert fair.admit("a1", 1, tenant_id=1) is True
        assert fair.admit("a2", 30, tenant_id=1) is False  # waits for tenant 1's slot
        assert fair.admit("b1", 30, tenant_id=2) is True
        fair.promote_all(lambda *job: enqueued.append(job))
        assert enqueued == []  # a1 still holds the slot

        # a1's worker is lost: nothing releases it, but its slot expires with its limit.
        connection.zadd(f"sandlot:fair:{queue}:running:1", {"a1": time.time() - 1})
        fair.promote_all(lambda *job: enqueued.append(job))
        assert enqueued == [("a2", 30, 1)]

        fair.release("a2", 1, lambda *job: enqueued.append(job))
        assert fair.admit("a3", 30, tenant_id=1) is True  # nothing waits, a slot is free
    finally:
        for key in connection.scan_iter(f"sandlot:fair:{queue}:*"):
            connection.delete(key)
