"""The sandbox check under RQ: the API enqueues on Redis, answers 202 when its bounded
wait runs out, and a real worker runs the `sandbox_check` kind to the reference result."""

from __future__ import annotations

from app.models import JobStatus
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.jobs.helpers import fresh_row, rq_job

URL = "/api/v1/system/sandbox-check"


def test_a_worker_runs_the_check_the_api_enqueued(rq_app, api, two_tenants, monkeypatch,
                                                  worker_in_process):
    require_docker()
    a, _ = two_tenants
    # No worker yet: the wait runs out.
    monkeypatch.setitem(rq_app.config, "SANDBOX_CHECK_WAIT_SECONDS", 0.5)

    response = api(rq_app, a.admin, a.tenant).post(URL, json={"config": {
        "sandbox_type": "docker", "docker": {"image": BASE_IMAGE}}})

    assert response.status_code == 202
    job_id = response.json["data"]["job_id"]
    assert response.json["data"]["status"] == "pending"
    queued = rq_job(rq_app, job_id)
    assert queued.timeout == fresh_row(job_id).timeout_sec == 150
    worker_in_process(rq_app)
    row = fresh_row(job_id)
    assert row.status == JobStatus.succeeded, row.error
    assert [c["ok"] for c in row.result["checks"]] == [True, True, True, None, None]
    assert "template_exists: ok" in row.log
