"""Without Redis: the audit export runs on the in-process worker thread, end to end over the API."""

from __future__ import annotations

import csv
import io
import threading
import uuid

from sqlalchemy import select

from app.extensions import db
from app.models import Job, JobStatus
from app.services import jobs as job_service
from tests.jobs import kinds
from tests.jobs.helpers import fresh_row, seed_audit, wait_for_terminal


def test_audit_export_runs_in_process_and_stays_in_its_tenant(make_app, api, two_tenants):
    a, b = two_tenants
    mine, theirs = seed_audit(a.tenant, "alpha"), seed_audit(b.tenant, "bravo")
    app = make_app(INPROCESS_WORKERS=1)
    gate = _hold_the_only_worker(app, a)

    response = api(app, a.admin, a.tenant).post("/api/v1/audit/export")

    assert response.status_code == 202
    job_id = response.json["data"]["job"]["id"]
    assert response.json["data"]["job"]["status"] == "pending"
    # The worker thread is busy, so the row we see on another connection was committed by
    # the request itself, before any worker touched it.
    with db.engine.connect() as other:
        status = other.scalar(select(Job.status).where(Job.id == job_id))
    assert status == JobStatus.pending

    gate.set()
    body = _poll_api_until_terminal(api(app, a.admin, a.tenant), job_id)

    assert body["status"] == "succeeded", body
    assert body["percent"] == 100
    rows = list(csv.DictReader(io.StringIO(body["result"]["csv"])))
    exported = {row["object_id"] for row in rows}
    assert set(mine) <= exported
    assert not exported & set(theirs)
    assert body["result"]["rows"] == len(rows) == body["result"]["total"]
    assert "wrote" in body["log"]


def test_another_tenants_admin_gets_404_for_the_job(make_app, api, two_tenants):
    a, b = two_tenants
    app = make_app()
    job_id = api(app, a.admin, a.tenant).post("/api/v1/audit/export").json["data"]["job"]["id"]
    wait_for_terminal(job_id)

    foreign = api(app, b.admin, b.tenant).get(f"/api/v1/jobs/{job_id}")

    assert foreign.status_code == 404
    assert foreign.json["error"]["code"] == "not_found"
    assert api(app, a.admin, a.tenant).get(f"/api/v1/jobs/{job_id}").status_code == 200


def test_a_crash_in_a_pool_thread_marks_the_row_errored(make_app, two_tenants):
    a, _ = two_tenants
    app = make_app()
    with app.app_context():
        job = job_service.enqueue("tests.exit", tenant_id=a.tenant.id, actor_id=a.admin.id)
        job_id = job.id

    row = wait_for_terminal(job_id)

    assert row.status == JobStatus.errored
    assert row.error == "Job crashed (SystemExit); see the worker log."


def test_heartbeat_thread_advances_heartbeat_at(make_app, two_tenants):
    a, _ = two_tenants
    app = make_app(JOB_HEARTBEAT_SECONDS=1)
    with app.app_context():
        job = job_service.enqueue("tests.sleep", tenant_id=a.tenant.id, actor_id=None,
                                  params={"seconds": 2.5})
        job_id = job.id

    row = wait_for_terminal(job_id)

    assert row.status == JobStatus.succeeded
    # tests.sleep never reports progress, so only the heartbeat thread moved heartbeat_at.
    assert (row.heartbeat_at - row.started_at).total_seconds() >= 0.9


def _hold_the_only_worker(app, group) -> threading.Event:
    """Occupy the single pool thread with a tests.block run; open the returned gate to free it."""
    name = uuid.uuid4().hex
    gate = kinds.GATES[name] = threading.Event()
    with app.app_context():
        blocker = job_service.enqueue("tests.block", tenant_id=group.tenant.id, actor_id=None,
                                      params={"gate": name})
        blocker_id = blocker.id
    _wait_until_running(blocker_id)
    return gate


def _wait_until_running(job_id: str) -> None:
    import time

    deadline = time.monotonic() + 10
    while fresh_row(job_id).status != JobStatus.running:
        assert time.monotonic() < deadline, "the blocking job never started"
        time.sleep(0.02)


def _poll_api_until_terminal(client, job_id: str, seconds: float = 20) -> dict:
    import time

    deadline = time.monotonic() + seconds
    while True:
        response = client.get(f"/api/v1/jobs/{job_id}")
        assert response.status_code == 200
        body = response.json["data"]
        if body["status"] not in ("pending", "running"):
            return body
        assert time.monotonic() < deadline, f"job still {body['status']} after {seconds}s"
        time.sleep(0.05)
