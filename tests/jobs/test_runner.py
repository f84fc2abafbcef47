"""The runner and the row: claim once, record the outcome once, reap what went silent."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

from app.extensions import db
from app.jobs.runner import run_job
from app.models import Job, JobStatus
from app.models.types import utcnow
from app.services import jobs as job_service
from tests.jobs import kinds
from tests.jobs.helpers import fresh_row

GRACE = 60


def make_row(tenant, kind: str = "tests.count", timeout_sec: int = 60, **values) -> str:
    """A job row in any state, written directly (the reaper judges rows, not how they got so)."""
    job = Job(id=str(uuid.uuid4()), tenant_id=tenant.id, kind=kind, params={},
              timeout_sec=timeout_sec, **values)
    db.session.add(job)
    db.session.commit()
    return job.id


def test_run_job_twice_runs_the_kind_once(two_tenants):
    a, _ = two_tenants
    job_id = make_row(a.tenant)

    assert run_job(job_id) == "succeeded"
    assert run_job(job_id) == "skipped"

    assert kinds.RUNS[job_id] == 1
    assert fresh_row(job_id).result == {"runs": 1}


def test_two_threads_racing_for_one_job_run_it_once(app, two_tenants):
    a, _ = two_tenants
    job_id = make_row(a.tenant)
    start, outcomes = threading.Barrier(2), []

    def race() -> None:
        with app.app_context():
            start.wait(timeout=10)
            outcomes.append(run_job(job_id))

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes) == ["skipped", "succeeded"]
    assert kinds.RUNS[job_id] == 1


def test_finish_on_a_terminal_row_keeps_the_first_outcome(two_tenants):
    a, _ = two_tenants
    job_id = make_row(a.tenant)
    assert job_service.finish(job_id, JobStatus.succeeded, result={"ok": True})

    assert not job_service.finish(job_id, JobStatus.errored, error="late crash report")

    row = fresh_row(job_id)
    assert (row.status, row.result, row.error) == (JobStatus.succeeded, {"ok": True}, None)


def test_progress_on_a_terminal_row_changes_nothing(two_tenants):
    a, _ = two_tenants
    job_id = make_row(a.tenant)
    job_service.finish(job_id, JobStatus.failed, error="no")

    job_service.progress(job_id, percent=50, stage="late", log_line="late")

    row = fresh_row(job_id)
    assert (row.percent, row.stage, row.log) == (0, "", "")


def test_unknown_kind_is_errored_not_left_running(two_tenants):
    a, _ = two_tenants
    job_id = make_row(a.tenant, kind="no.such.kind")

    assert run_job(job_id) == "errored"
    assert fresh_row(job_id).error == "Unknown job kind 'no.such.kind'."


def test_reaper_errors_silent_overdue_and_unstarted_rows_and_leaves_fresh_ones(two_tenants):
    a, _ = two_tenants
    now = utcnow()

    def ago(seconds: int):
        return now - timedelta(seconds=seconds)

    silent = make_row(a.tenant, status=JobStatus.running, started_at=ago(300),
                      heartbeat_at=ago(GRACE + 30), timeout_sec=600)
    overdue = make_row(a.tenant, status=JobStatus.running, started_at=ago(GRACE + 100),
                       heartbeat_at=ago(1), timeout_sec=60)
    never_beat = make_row(a.tenant, status=JobStatus.running, created_at=ago(GRACE + 30))
    unstarted = make_row(a.tenant, status=JobStatus.pending, created_at=ago(7200))
    beating = make_row(a.tenant, status=JobStatus.running, started_at=ago(300),
                       heartbeat_at=ago(2), timeout_sec=600)
    queued = make_row(a.tenant, status=JobStatus.pending, created_at=ago(30))
    ended = make_row(a.tenant, status=JobStatus.succeeded, started_at=ago(9000),
                     heartbeat_at=ago(9000), finished_at=ago(8000), timeout_sec=60)

    job_service.reap(GRACE, pending_max=3600)

    assert _outcome(silent) == (JobStatus.errored,
                                f"The worker went silent (no heartbeat for {GRACE} s).")
    # Past its limit (and the grace) a run has failed, saying which limit, whatever its
    # heartbeat says (an in-process thread cannot be stopped; issue 11 item 5).
    assert _outcome(overdue) == (JobStatus.failed,
                                 "Stopped at its time limit: this job may run for at most 60 s.")
    assert _outcome(never_beat)[0] == JobStatus.errored
    assert _outcome(unstarted) == (JobStatus.errored, "Job never started.")
    assert _outcome(beating) == (JobStatus.running, None)
    assert _outcome(queued) == (JobStatus.pending, None)
    assert _outcome(ended) == (JobStatus.succeeded, None)
    # A reaped row is reaped once. (Not asserting the first pass's count: another app's
    # background reaper thread in this test session may have got to a row first.)
    assert job_service.reap(GRACE, pending_max=3600) == 0


def _outcome(job_id: str):
    row = fresh_row(job_id)
    return row.status, row.error
