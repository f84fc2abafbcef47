"""The test harness itself: no test leaves work running past its end, and a cleanup that
meets a straggler fails fast and names it instead of deadlocking (issue: PostgreSQL's
TRUNCATE deadlocked against an audit export still running on the in-process pool)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from sqlalchemy import func, select, text

from app.extensions import db
from app.models import Job, JobStatus, SandboxSession, Tenant
from app.services import jobs as job_service
from tests.conftest import settle, settle_and_wipe, wipe
from tests.jobs import kinds
from tests.sweeps import secrets


def test_settle_waits_for_the_job_a_request_started(two_tenants, bearer, built_apps):
    a, _ = two_tenants
    response = bearer(a.admin, a.tenant).post("/api/v1/audit/export")
    job_id = response.json["data"]["job"]["id"]

    assert settle(built_apps) == {}

    db.session.expire_all()
    assert db.session.get(Job, job_id).status == JobStatus.succeeded


def test_settle_names_a_job_that_outlives_it(two_tenants, built_apps):
    a, _ = two_tenants
    gate = f"harness-{uuid.uuid4().hex[:8]}"
    kinds.GATES[gate] = threading.Event()
    job = job_service.enqueue("tests.block", tenant_id=a.tenant.id, actor_id=None,
                              params={"gate": gate})
    try:
        leftovers = settle(built_apps, seconds=0.2)
        assert list(leftovers) == [job.id]
        assert "tests.block" in leftovers[job.id]
        assert settle(built_apps, seconds=0.2, ignore={job.id}) == {}  # named once, not again
    finally:
        kinds.GATES[gate].set()
    assert settle(built_apps) == {}


def test_settle_names_an_exec_run_that_outlives_it(app, built_apps):
    """Exec runs go on off the request thread (their own pool): settle waits for them too."""
    from concurrent.futures import Future

    from app.services.sessions import runs

    pool = runs._pool(app)
    assert pool.take(10)
    thread = Future()  # stands for the run's thread; the test ends it
    pool.track(app, "run-harness", thread, "no-lease")
    try:
        assert settle(built_apps, seconds=0.2) == {"run-harness": "exec run run-harness"}
    finally:
        thread.set_result(None)
    assert settle(built_apps, seconds=1) == {} and pool.total == 0


def test_wipe_fails_fast_naming_who_holds_the_lock(app, two_tenants):
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no table locks to wait on")
    holder = db.engine.connect()
    transaction = holder.begin()
    holder.execute(text("LOCK TABLE tenants IN ACCESS SHARE MODE"))
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="LOCK TABLE tenants"):
            wipe(app, lock_timeout="300ms")
    finally:
        transaction.rollback()
        holder.close()
    assert time.monotonic() - started < 5


def test_cleanup_empties_the_database_even_when_a_left_session_no_longer_decrypts(
        app, two_tenants, built_apps, cleanup_state):
    """A key-rotation test leaves rows under a key that is gone: ending its sessions fails,
    and the cleanup must still empty every table (one failure, not a cascade)."""
    a, _ = two_tenants
    secrets.SEEDERS["sandbox_sessions.traffic_token"](a.tenant, "canary-token")
    db.session.commit()
    with secrets.using_keys(app, [secrets.new_key()]):
        settle_and_wipe(app, built_apps, cleanup_state)
    assert cleanup_state["dirty"] is False
    assert db.session.scalar(select(func.count()).select_from(SandboxSession)) == 0
    assert db.session.scalar(select(func.count()).select_from(Tenant)) == 0
