"""With Redis: a real redis-server, RQ enqueue, and a real worker (the `flask worker` CLI in a
subprocess, or run_worker in this process). The row is the truth; RQ only runs it."""

from __future__ import annotations

import csv
import io

import pytest
from rq.job import JobStatus as RQStatus

from app.jobs.queue import mark_errored
from app.models import JobStatus
from app.services import job_limits
from app.services import jobs as job_service
from tests.jobs.helpers import fresh_row, rq_job, seed_audit


def test_flask_worker_runs_the_audit_export_enqueued_by_the_api(
        rq_app, api, two_tenants, worker_subprocess):
    a, b = two_tenants
    mine, theirs = seed_audit(a.tenant, "alpha"), seed_audit(b.tenant, "bravo")

    response = api(rq_app, a.admin, a.tenant).post("/api/v1/audit/export")

    assert response.status_code == 202
    job_id = response.json["data"]["job"]["id"]
    assert fresh_row(job_id).status == JobStatus.pending
    queued = rq_job(rq_app, job_id)  # RQ's job id is the row's id
    assert queued.get_status() == RQStatus.QUEUED
    assert queued.timeout == fresh_row(job_id).timeout_sec == job_limits.LIMITS["audit_export"]
    assert queued.failure_ttl == rq_app.config["JOB_FAILURE_TTL"]
    assert queued.failure_callback is mark_errored
    assert queued.failure_callback_timeout == 30
    assert queued.args == (job_id,)

    worker_subprocess(rq_app)

    row = fresh_row(job_id)
    assert row.status == JobStatus.succeeded, row.error
    exported = {r["object_id"] for r in csv.DictReader(io.StringIO(row.result["csv"]))}
    assert set(mine) <= exported and not exported & set(theirs)
    done = rq_job(rq_app, job_id)
    assert done.get_status() == RQStatus.FINISHED
    assert done.return_value() == "succeeded"


@pytest.mark.parametrize("runner", ["worker_subprocess", "worker_in_process"])
def test_a_crash_runs_the_failure_callback_which_marks_the_row_errored(
        request, runner, rq_app, two_tenants):
    a, _ = two_tenants
    with rq_app.app_context():
        job_id = job_service.enqueue("tests.exit", tenant_id=a.tenant.id, actor_id=None).id

    request.getfixturevalue(runner)(rq_app)

    row = fresh_row(job_id)
    assert row.status == JobStatus.errored
    # Written by queue.mark_errored: the runner lets SystemExit through untouched.
    assert row.error == "Job crashed (SystemExit); see the worker log."
    assert rq_job(rq_app, job_id).get_status() == RQStatus.FAILED


@pytest.mark.parametrize("runner", ["worker_subprocess", "worker_in_process"])
def test_a_job_past_its_timeout_is_stopped_and_its_row_failed(
        request, runner, rq_app, two_tenants):
    a, _ = two_tenants
    with rq_app.app_context():
        job_id = job_service.enqueue("tests.sleep", tenant_id=a.tenant.id, actor_id=None,
                                     params={"seconds": 30}, timeout_sec=1).id
    assert rq_job(rq_app, job_id).timeout == 1

    # Returns after ~1 s, not 30: RQ stopped it. The subprocess's log explains a miss.
    done = request.getfixturevalue(runner)(rq_app)
    said = f"{done.stdout}\n{done.stderr}" if done is not None else ""

    row = fresh_row(job_id)
    assert row.status == JobStatus.failed, said
    assert row.error == "Stopped at its time limit: this job may run for at most 1 s."
    assert rq_job(rq_app, job_id).get_status() == RQStatus.FAILED


def test_a_second_delivery_of_the_same_job_is_skipped(rq_app, two_tenants, worker_in_process):
    a, _ = two_tenants
    with rq_app.app_context():
        job_id = job_service.enqueue("tests.count", tenant_id=a.tenant.id, actor_id=None).id
    worker_in_process(rq_app)
    first = fresh_row(job_id)
    # Redelivery (e.g. a requeue after a worker was lost) of the same id: runs nothing.
    rq_app.extensions["sandlot_dispatcher"].submit(job_id, 60, tenant_id=a.tenant.id)
    worker_in_process(rq_app)

    assert first.status == JobStatus.succeeded and first.result == {"runs": 1}
    assert rq_job(rq_app, job_id).return_value() == "skipped"
    assert fresh_row(job_id).result == {"runs": 1}
