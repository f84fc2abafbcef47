"""GET .../install-events (reference 7.3) over real HTTP: 404 JSON before any SSE header,
the four headers, the last record then live frames, verdicts synthesised from the row,
keep-alive, detached, disconnects, and pub/sub vs database polling."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from app.extensions import db
from app.models import EventKind, InstallStatus
from app.models.types import utcnow
from app.services.skills.installs.events import EventLog
from tests.streams.conftest import make_skill, read_stream, token, url_of


@pytest.fixture
def fast(app, monkeypatch):
    monkeypatch.setitem(app.config, "SKILL_STREAM_KEEPALIVE_SECONDS", 0.3)


def log_for(row) -> EventLog:
    return EventLog(row.tenant_id, row.id, row.install_message_id)


def test_foreign_or_deleted_skill_is_404_json_and_no_stream(app, two_tenants, serve):
    a, b = two_tenants
    base, headers = serve(app), token(app, a.admin, a.tenant)
    theirs = make_skill(b.tenant)
    stream = read_stream(base, url_of(theirs), headers)
    stream.ended.wait(5)
    assert stream.status == 404
    assert stream.headers["content-type"].startswith("application/json")
    assert "x-accel-buffering" not in stream.headers
    assert b'"success":false' in stream.body.replace(b" ", b"")
    mine = make_skill(a.tenant)
    mine.deleted_at = utcnow()
    db.session.commit()
    gone = read_stream(base, url_of(mine), headers)
    gone.ended.wait(5)
    assert gone.status == 404 and gone.frames == []
    # Reading a transcript is just as private.
    assert read_stream(base, url_of(theirs, "transcript"), headers).status == 404


def test_viewer_and_contributor_are_refused(app, two_tenants, serve):
    a, _ = two_tenants
    row, base = make_skill(a.tenant), serve(app)
    for user in (a.viewer, a.contributor):
        stream = read_stream(base, url_of(row), token(app, user, a.tenant))
        stream.ended.wait(5)
        assert stream.status == 403 and stream.frames == []


def test_last_record_then_live_frames_until_done_with_the_four_headers(app, two_tenants, serve,
                                                                       fast):
    a, _ = two_tenants
    row = make_skill(a.tenant)
    events = log_for(row)
    events.emit("accepted", 10)
    events.emit("sandbox_ready", 25)
    offered = {**token(app, a.admin, a.tenant), "Accept-Encoding": "br, gzip"}
    stream = read_stream(serve(app), url_of(row), offered)
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert "content-encoding" not in stream.headers  # compression would buffer the frames
    assert stream.headers["cache-control"] == "no-cache"
    assert stream.headers["x-accel-buffering"] == "no"
    assert "keep-alive" in stream.headers["connection"].lower()  # the dev server adds close
    assert stream.wait_frames(1)[0] == {"percent": 25, "stage": "sandbox_ready", "done": False}
    events.emit("seeding", 28, message="seeding 2 files")
    events.command("pip install -r requirements.txt", 1)
    events.output("Successfully installed nothing")  # transcript only, not a progress frame
    events.emit("verify_note", 80, kind=EventKind.note, message="no tests found")
    row.status = InstallStatus.ready
    db.session.commit()
    events.emit("done", 100, status="ready")
    assert stream.ended.wait(10)
    assert [f["stage"] for f in stream.frames] == [
        "sandbox_ready", "seeding", "agent", "verify_note", "done"]
    assert stream.frames[1]["log"] == "seeding 2 files"
    assert stream.frames[2]["log"] == "pip install -r requirements.txt"
    assert stream.frames[2]["percent"] == 38
    assert stream.frames[-1] == {"percent": 100, "stage": "done", "status": "ready", "done": True}


@pytest.mark.parametrize("status, error, expected", [
    (InstallStatus.failed, "install stopped",
     {"percent": 100, "stage": "failed", "status": "failed", "log": "install stopped",
      "done": True}),
    (InstallStatus.ready, None, {"percent": 100, "stage": "done", "status": "ready",
                                 "done": True}),
])
def test_a_run_that_ended_without_publishing_gets_its_verdict_from_the_row(
        app, two_tenants, serve, status, error, expected):
    a, _ = two_tenants
    row = make_skill(a.tenant, status=status)
    row.error = error
    db.session.commit()
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant))
    assert stream.ended.wait(5)
    assert stream.frames == [expected]


def test_a_crashed_run_ends_the_stream_at_the_next_reread(app, two_tenants, serve, fast):
    """The worker died after `agent`; the reaper rewrites the row without an event."""
    a, _ = two_tenants
    row = make_skill(a.tenant)
    log_for(row).command("sleep 300", 1)
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant))
    stream.wait_frames(1)
    time.sleep(0.5)
    assert not stream.ended.is_set() and ": keep-alive" in stream.comments
    row.status, row.error = InstallStatus.failed, "the install worker stopped"
    db.session.commit()
    assert stream.ended.wait(5)
    assert stream.frames[-1] == {"percent": 100, "stage": "failed", "status": "failed",
                                 "log": "the install worker stopped", "done": True}


def test_a_finished_removal_is_synthesised_as_removed(app, two_tenants, serve, fast):
    a, _ = two_tenants
    row = make_skill(a.tenant, status=InstallStatus.removing)
    events = log_for(row)
    events.emit("accepted", 5)
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant))
    assert stream.wait_frames(1)[0]["percent"] == 5
    events.emit("sandbox_ready", 30)
    events.emit("removed", 60)
    row.deleted_at = utcnow()  # the removal deletes the row; its done frame is lost
    db.session.commit()
    assert stream.ended.wait(5)
    assert [f["stage"] for f in stream.frames] == ["accepted", "sandbox_ready", "removed",
                                                   "done"]
    assert stream.frames[-1] == {"percent": 100, "stage": "done", "status": "removed",
                                 "done": True}


def test_a_removal_not_yet_started_does_not_replay_the_installs_ready(app, two_tenants,
                                                                      serve, fast):
    """Between the uninstall's 202 and its run's start the row still names the install's
    run, whose last frame is `done`/`ready`: old news, not this removal's verdict. The
    stream follows the removal and ends `removed` once the row goes away."""
    a, _ = two_tenants
    row = make_skill(a.tenant)
    log_for(row).emit("done", 100, status="ready")
    row.status = InstallStatus.removing
    db.session.commit()
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant))
    time.sleep(0.8)
    assert not stream.ended.is_set(), stream.frames
    row.install_message_id = str(uuid.uuid4())  # the removal run starts and names itself
    db.session.commit()
    removal = log_for(row)
    removal.emit("accepted", 5)
    removal.emit("removed", 60)
    row.deleted_at = utcnow()
    db.session.commit()
    assert stream.ended.wait(5)
    assert all(f.get("status") != "ready" for f in stream.frames), stream.frames
    assert stream.frames[-1] == {"percent": 100, "stage": "done", "status": "removed",
                                 "done": True}


def test_detached_after_the_follow_limit_and_the_run_goes_on(app, two_tenants, serve, fast,
                                                             monkeypatch):
    a, _ = two_tenants
    monkeypatch.setitem(app.config, "SKILL_STREAM_MAX_SECONDS", 1.0)
    row = make_skill(a.tenant)
    log_for(row).emit("seeded", 35)
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant))
    assert stream.ended.wait(5)
    assert stream.frames[-1] == {
        "percent": 35, "stage": "detached", "status": "installing", "done": True,
        "log": "stopped following this run; reconnect or poll the skill for its status"}
    db.session.remove()
    assert db.session.get(type(row), row.id).status == InstallStatus.installing


def test_a_reconnect_sees_the_last_state_then_live_frames(app, two_tenants, serve, fast):
    a, _ = two_tenants
    row = make_skill(a.tenant)
    events = log_for(row)
    events.emit("accepted", 10)
    base, headers = serve(app), token(app, a.admin, a.tenant)
    first = read_stream(base, url_of(row), headers, limit=1.0)  # the client gives up at 1 s
    first.ended.wait(5)
    events.emit("seeded", 35)
    again = read_stream(base, url_of(row), headers)
    assert again.wait_frames(1)[0]["stage"] == "seeded"
    events.emit("done", 100, status="ready")
    assert again.ended.wait(5)
    assert [f["stage"] for f in again.frames] == ["seeded", "done"]


def test_an_older_runs_verdict_is_not_the_last_record_of_a_new_run(app, two_tenants, serve,
                                                                   fast):
    a, _ = two_tenants
    row = make_skill(a.tenant)
    log_for(row).emit("done", 100, status="ready")
    row.install_message_id = "second-run"  # a reinstall accepted, no event written yet
    db.session.commit()
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant))
    time.sleep(0.5)
    assert stream.frames == [] and not stream.ended.is_set()
    log_for(row).emit("accepted", 10)
    assert stream.wait_frames(1)[0]["stage"] == "accepted"
    log_for(row).emit("done", 100, status="ready")
    assert stream.ended.wait(5)


def _latency(app, two_tenants, serve) -> float:
    a, _ = two_tenants
    row = make_skill(a.tenant)
    log_for(row).emit("accepted", 10)
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant))
    stream.wait_frames(1)
    time.sleep(0.3)  # the listener is subscribed
    written = time.monotonic()
    log_for(row).emit("done", 100, status="ready")
    assert stream.ended.wait(10)
    return stream.arrived[-1] - written


def test_with_redis_a_frame_arrives_by_pubsub_not_by_the_poll(app_factory, two_tenants, serve,
                                                              redis_url):
    """The re-read is 5 s; a frame in well under a second came through the publish,
    including one written by another process (the notice crosses Redis)."""
    app = app_factory(REDIS_URL=redis_url, SKILL_STREAM_POLL_SECONDS=5.0)
    with app.app_context():
        assert _latency(app, two_tenants, serve) < 0.5


def test_without_redis_the_stream_polls_the_database(app, two_tenants, serve, monkeypatch):
    """A writer in another process cannot wake us without Redis: the poll finds it."""
    from app.services import wakeups
    monkeypatch.setattr(wakeups, "_wake", lambda skill_id: None)  # as if written elsewhere
    monkeypatch.setitem(app.config, "SKILL_STREAM_POLL_SECONDS", 0.2)
    assert _latency(app, two_tenants, serve) < 1.0


def test_disconnecting_never_cancels_the_install(app, two_tenants, serve, fast):
    a, _ = two_tenants
    row = make_skill(a.tenant)
    log_for(row).emit("accepted", 10)
    stream = read_stream(serve(app), url_of(row), token(app, a.admin, a.tenant), limit=0.5)
    stream.ended.wait(5)
    threading.Event().wait(0.5)
    db.session.remove()
    fresh = db.session.get(type(row), row.id)
    assert (fresh.status, fresh.stop_requested_at) == (InstallStatus.installing, None)


def test_events_of_a_removal_that_ends_as_the_stream_opens_come_before_its_verdict(
        app, two_tenants):
    """The row goes between the stream's first frame and its first look at the row (a
    loaded server pauses a generator right there): the events the run committed before
    are still sent, then the verdict; before, the stream jumped to `done`."""
    import queue

    from app.services.skills.installs import stream as install_stream

    a, _ = two_tenants
    row = make_skill(a.tenant, status=InstallStatus.removing)
    events = log_for(row)
    events.emit("accepted", 5)
    frames = install_stream.follow_progress(a.tenant.id, row, queue.SimpleQueue())
    assert '"stage":"accepted"' in next(frames)
    events.emit("sandbox_ready", 30)
    events.emit("removed", 60)
    row.deleted_at = utcnow()
    db.session.commit()
    sent = [json.loads(frame.split("data: ", 1)[1]) for frame in frames]
    assert [(f["stage"], f.get("status")) for f in sent] == [
        ("sandbox_ready", None), ("removed", None), ("done", "removed")]
