"""Open streams cannot starve the app (issue 12 item 3): 200 install-event streams held
open against a real gunicorn started with the project's gunicorn.conf.py, while GET /login
stays within a few times its idle latency and every stream still receives a live frame.
Past SKILL_STREAMS_MAX a stream is refused with 503 instead of taking a page's thread."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from app.extensions import db
from app.models import InstallStatus
from app.services import capacity
from tests import serving
from tests.streams.conftest import make_skill, read_stream, token, url_of
from tests.streams.test_install_events import log_for

STREAMS = 200


@pytest.fixture
def gunicorn(db_url, redis_url):
    with serving.gunicorn("tests.streams.server_app:make_app()", db_url, redis_url) as base:
        yield base


def test_200_open_streams_leave_pages_fast_and_all_streams_live(app_factory, two_tenants,
                                                                gunicorn, redis_url):
    writer = app_factory(REDIS_URL=redis_url)  # publishes the notice the server listens to
    with writer.app_context():
        a, _ = two_tenants
        row = make_skill(a.tenant)
        log_for(row).emit("accepted", 10)
        headers = token(writer, a.admin, a.tenant)
        idle = serving.login_latency(gunicorn)
        streams = [read_stream(gunicorn, url_of(row), headers, limit=120)
                   for _ in range(STREAMS)]
        assert all(s.status == 200 for s in streams)
        assert all(s.wait_frames(1, 20) for s in streams)
        busy = serving.login_latency(gunicorn)
        print(f"GET /login median: idle {idle * 1000:.1f} ms, "
              f"with {STREAMS} open streams {busy * 1000:.1f} ms")
        serving.assert_pages_stay_fast(idle, busy)
        assert all(not s.ended.is_set() for s in streams)  # all still open, none starved
        row.status = InstallStatus.ready
        db.session.commit()
        log_for(row).emit("done", 100, status="ready")
        assert all(s.ended.wait(20) for s in streams)
        assert all(s.frames[-1]["stage"] == "done" for s in streams)
        db.session.remove()  # no transaction of this app outlives the test (PostgreSQL DDL)


def test_past_the_cap_a_stream_is_refused_not_queued(app, two_tenants, serve, monkeypatch):
    monkeypatch.setitem(app.config, "SKILL_STREAMS_MAX", 2)
    # A count of its own: streams that earlier tests hung up on may still hold slots of
    # the shared app until their server threads notice (at their next write).
    monkeypatch.setitem(app.extensions, "sandlot_thread_slots", capacity.ThreadSlots())
    # A dropped client is noticed at the next write: the keep-alive bounds how long its
    # slot stays taken.
    monkeypatch.setitem(app.config, "SKILL_STREAM_KEEPALIVE_SECONDS", 0.3)
    a, _ = two_tenants
    row = make_skill(a.tenant)
    log_for(row).emit("accepted", 10)
    base, headers = serve(app), token(app, a.admin, a.tenant)
    held = [read_stream(base, url_of(row), headers, limit=3) for _ in range(2)]
    assert all(s.wait_frames(1) for s in held)
    refused = httpx.get(base + url_of(row), headers=headers)
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "unavailable"
    for stream in held:
        stream.stop.set()
        assert stream.ended.wait(5)
    deadline = time.monotonic() + 5  # the slots come back once the server notices
    statuses = []
    while time.monotonic() < deadline:
        again = read_stream(base, url_of(row), headers, limit=0.5)
        statuses.append(again.status)
        if again.status == 200:
            break
        time.sleep(0.2)
    assert statuses[-1] == 200, statuses


def _refused(base: str, path: str, headers: dict[str, str]) -> dict:
    probe = read_stream(base, path, headers, limit=5)
    probe.ended.wait(5)
    assert probe.status == 429, (probe.status, probe.body)
    error = json.loads(probe.body)["error"]
    assert error["code"] == "quota_exceeded"
    return error["data"]


def test_one_member_or_workspace_holds_only_its_share_of_the_streams(app, two_tenants,
                                                                     serve, monkeypatch):
    """Issue 22 item 5: one viewer opened every stream slot of the process on one run, and
    another workspace's streams got 503. Each member and each workspace now holds at most
    its share; past it the answer is 429 `quota_exceeded`, and others still open theirs."""
    monkeypatch.setitem(app.config, "SKILL_STREAMS_MAX", 10)
    monkeypatch.setitem(app.config, "STREAMS_PER_MEMBER", 2)
    monkeypatch.setitem(app.config, "STREAMS_PER_WORKSPACE", 3)
    monkeypatch.setitem(app.extensions, "sandlot_thread_slots", capacity.ThreadSlots())
    a, b = two_tenants
    rows = {group.tenant.id: make_skill(group.tenant) for group in (a, b)}
    for row in rows.values():
        log_for(row).emit("accepted", 10)
    base = serve(app)
    admin_a, owner_a = token(app, a.admin, a.tenant), token(app, a.owner, a.tenant)
    path_a = url_of(rows[a.tenant.id])
    held = [read_stream(base, path_a, admin_a, limit=5) for _ in range(2)]
    assert all(s.wait_frames(1) for s in held)
    assert _refused(base, path_a, admin_a) == {"quota": "streams_per_member", "limit": 2,
                                               "used": 2}
    held.append(read_stream(base, path_a, owner_a, limit=5))
    assert held[-1].wait_frames(1)
    assert _refused(base, path_a, owner_a) == {"quota": "streams_per_workspace", "limit": 3,
                                               "used": 3}
    theirs = read_stream(base, url_of(rows[b.tenant.id]), token(app, b.admin, b.tenant),
                         limit=5)
    assert theirs.wait_frames(1) and theirs.status == 200
    for stream in [*held, theirs]:
        stream.hang_up()
