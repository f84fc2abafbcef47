"""Redis unreachable at enqueue: the caller gets a 503 envelope and the row does not linger."""

from __future__ import annotations

import socket

from sqlalchemy import select

from app.extensions import db
from app.models import Job, JobStatus


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_export_answers_503_and_marks_the_row_errored_when_redis_is_down(
        make_app, api, two_tenants):
    a, _ = two_tenants
    app = make_app(REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0")

    response = api(app, a.admin, a.tenant).post("/api/v1/audit/export")

    assert response.status_code == 503
    assert response.json["success"] is False
    assert response.json["error"]["code"] == "unavailable"
    rows = list(db.session.scalars(select(Job).where(Job.tenant_id == a.tenant.id)))
    assert len(rows) == 1
    assert rows[0].status == JobStatus.errored
    assert rows[0].error == "could not enqueue: ConnectionError"
    assert rows[0].finished_at is not None
