"""The job fragment polls while a job runs and stops itself (286) when it ends."""

from __future__ import annotations

import time
import uuid

from app.extensions import db
from app.models import Job, JobStatus
from app.models.types import utcnow
from tests.web._support import post_form, text

CSV = "id,created_at,actor,action,object_type,object_id\n1,2026-01-01,a,member.added,user,1\n"


def make_job(tenant, status=JobStatus.pending, kind="audit_export", result=None) -> Job:
    job = Job(id=str(uuid.uuid4()), tenant_id=tenant.id, actor_id=None, kind=kind,
              target_type="tenant", target_id=str(tenant.id), params={}, status=status,
              percent=100 if status == JobStatus.succeeded else 40, stage="exporting",
              result=result, finished_at=utcnow() if status.terminal else None)
    db.session.add(job)
    db.session.commit()
    return job


def hx_get(client, path):
    return client.get(path, headers={"HX-Request": "true"})


def test_a_running_job_keeps_polling(two_tenants, login_as):
    a, _ = two_tenants
    job = make_job(a.tenant, JobStatus.running)
    response = hx_get(login_as(a.admin, a.tenant), f"/jobs/{job.id}")
    body = text(response)
    assert response.status_code == 200
    assert 'hx-trigger="every 1s"' in body and f'hx-get="/jobs/{job.id}"' in body
    assert 'value="40"' in body and "exporting" in body and "Running" in body
    assert "Download CSV" not in body


def test_a_pending_job_keeps_polling(two_tenants, login_as):
    a, _ = two_tenants
    job = make_job(a.tenant, JobStatus.pending)
    response = hx_get(login_as(a.admin, a.tenant), f"/jobs/{job.id}")
    assert response.status_code == 200 and 'hx-trigger="every 1s"' in text(response)


def test_a_finished_export_stops_polling_and_offers_the_csv(two_tenants, login_as):
    a, _ = two_tenants
    job = make_job(a.tenant, JobStatus.succeeded,
                   result={"csv": CSV, "rows": 1, "total": 1, "truncated": False})
    client = login_as(a.admin, a.tenant)
    response = hx_get(client, f"/jobs/{job.id}")
    body = text(response)
    assert response.status_code == 286
    assert "hx-trigger" not in body and "hx-get" not in body
    assert "Succeeded" in body and f'href="/jobs/{job.id}/export.csv"' in body
    download = client.get(f"/jobs/{job.id}/export.csv")
    assert download.status_code == 200
    assert download.mimetype == "text/csv"
    assert download.headers["Content-Disposition"].startswith("attachment; filename=")
    assert text(download) == CSV


def test_a_failed_job_stops_polling_and_says_why(two_tenants, login_as):
    a, _ = two_tenants
    job = make_job(a.tenant, JobStatus.errored)
    job.error = "Job ran past its timeout."
    db.session.commit()
    client = login_as(a.admin, a.tenant)
    response = hx_get(client, f"/jobs/{job.id}")
    assert response.status_code == 286
    assert "Job ran past its timeout." in text(response)
    assert client.get(f"/jobs/{job.id}/export.csv").status_code == 404


def test_no_csv_before_the_export_finished_or_for_other_kinds(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    running = make_job(a.tenant, JobStatus.running)
    other = make_job(a.tenant, JobStatus.succeeded, kind="something_else", result={"csv": CSV})
    assert client.get(f"/jobs/{running.id}/export.csv").status_code == 404
    assert client.get(f"/jobs/{other.id}/export.csv").status_code == 404


def test_another_tenants_job_is_404(two_tenants, login_as):
    a, b = two_tenants
    job = make_job(b.tenant, JobStatus.succeeded, result={"csv": CSV, "rows": 1, "total": 1})
    client = login_as(a.owner, a.tenant)
    assert hx_get(client, f"/jobs/{job.id}").status_code == 404
    assert client.get(f"/jobs/{job.id}").status_code == 404
    assert client.get(f"/jobs/{job.id}/export.csv").status_code == 404
    assert client.get(f"/jobs/{uuid.uuid4()}").status_code == 404


def test_viewer_cannot_see_jobs_or_export(two_tenants, login_as):
    a, _ = two_tenants
    job = make_job(a.tenant, JobStatus.succeeded, result={"csv": CSV, "rows": 1, "total": 1})
    client = login_as(a.viewer, a.tenant)
    assert client.get(f"/jobs/{job.id}").status_code == 403
    assert client.get(f"/jobs/{job.id}/export.csv").status_code == 403
    assert post_form(client, "/audit/export").status_code == 403


def test_export_button_enqueues_and_the_fragment_reaches_succeeded(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    post_form(client, "/members/invitations", {"email": "audited@a.test", "role": "viewer"})
    response = post_form(client, "/audit/export", htmx=True)
    assert response.status_code == 202
    job = db.session.scalars(db.select(Job).filter_by(tenant_id=a.tenant.id)).one()
    assert job.kind == "audit_export" and job.target_type == "tenant"
    assert job.target_id == str(a.tenant.id) and job.actor_id == a.admin.id
    assert f'id="job-{job.id}"' in text(response)
    deadline = time.monotonic() + 15
    while (polled := hx_get(client, f"/jobs/{job.id}")).status_code != 286:
        assert polled.status_code == 200 and time.monotonic() < deadline
        time.sleep(0.1)
    assert "Succeeded" in text(polled)
    csv_text = text(client.get(f"/jobs/{job.id}/export.csv"))
    assert csv_text.startswith("id,created_at,actor,action")
    assert "invitation.created" in csv_text and a.admin.email in csv_text


def test_export_without_htmx_redirects_to_the_job_page(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/audit/export")
    assert response.status_code == 302 and response.headers["Location"].startswith("/jobs/")
    page = client.get(response.headers["Location"])
    assert page.status_code in (200, 286) and "Audit log export" in text(page)
    job_id = response.headers["Location"].rsplit("/", 1)[1]
    deadline = time.monotonic() + 15
    while hx_get(client, f"/jobs/{job_id}").status_code != 286:
        assert time.monotonic() < deadline
        time.sleep(0.1)
