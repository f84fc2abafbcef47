"""A run records the process executing it and a heartbeat (issue 28 item 4): when that
process dies, the reaper pass of any other process marks the run `lost` within a minute
(here within seconds: the thresholds are short), its event stream ends on `lost`; a run
on a live process keeps its heartbeat fresh and is never marked lost."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.jobs.queue import start_reaper
from app.models import ExecRun, RunStatus, SandboxSession
from app.models.types import utcnow
from app.services.sessions import runs
from tests import serving
from tests.backends.conftest import DOCKER_HOST
from tests.runs.conftest import docker_config, open_session, wait_run
from tests.streams.conftest import read_stream, token

LOST_SENTENCE = "The server running this command stopped"


def _row(app, run_id: str) -> ExecRun:
    db.session.remove()
    return db.session.get(ExecRun, run_id)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


@pytest.fixture
def short_heartbeats(app, monkeypatch):
    """A heartbeat older than 2 s is a dead owner's; this process refreshes every 0.3 s."""
    monkeypatch.setitem(app.config, "RUN_HEARTBEAT_SECONDS", 0.3)
    monkeypatch.setitem(app.config, "RUN_LOST_SECONDS", 2)
    # The app outlives the test: its heartbeat thread (asleep for its last interval) too.
    monkeypatch.delitem(app.extensions, "exec_run_heartbeats", raising=False)
    yield
    app.extensions.pop("exec_run_heartbeats", None)


def test_a_killed_web_process_s_run_is_lost_within_seconds(
        app, two_tenants, bearer, db_url, redis_url, serve, short_heartbeats, monkeypatch):
    a, _ = two_tenants
    config = docker_config(bearer(a.admin, a.tenant))
    session_id = open_session(bearer(a.contributor, a.tenant), config["id"])
    headers = token(app, a.contributor, a.tenant)
    path = f"/api/v1/sessions/{session_id}"
    with serving.gunicorn("tests.runs.server_app:make_app()", db_url, redis_url) as base, \
            httpx.Client(timeout=60, headers=headers) as client:
        started = client.post(f"{base}{path}/exec", json={"command": "sleep 60"})
        assert started.status_code == 202, started.text
        run_id = started.json()["data"]["id"]
        master = next(p for p in _children(os.getpid())
                      if "gunicorn" in Path(f"/proc/{p}/cmdline").read_text())
        (worker,) = _children(master)
        row = _row(app, run_id)
        assert row.status == RunStatus.running
        assert row.owner.startswith(f"{socket.gethostname()}:{worker}:"), row.owner
        assert len(row.owner.split(":")[2]) >= 8  # a start token: a reused pid differs
        beat = row.heartbeat_at
        time.sleep(1)  # the live worker refreshes it (every 0.5 s in server_app)
        assert _row(app, run_id).heartbeat_at > beat
        assert runs.reap_lost() == 0  # a live owner's run is not lost
        # A follower that reads the row again only when woken: the reaper's wake ends it.
        monkeypatch.setitem(app.config, "RUN_STREAM_POLL_SECONDS", 30)
        monkeypatch.setitem(app.config, "SKILL_STREAM_KEEPALIVE_SECONDS", 30)
        stream = read_stream(serve(app), f"{path}/runs/{run_id}/events", headers, limit=40)
        time.sleep(0.5)  # it has read the row once
        os.kill(master, signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()
        while (marked := runs.reap_lost()) == 0 and time.monotonic() - killed < 10:
            time.sleep(0.2)
        assert marked == 1
        lost_after = time.monotonic() - killed
        assert lost_after < 5, lost_after
        row = _row(app, run_id)
        assert row.status == RunStatus.lost and row.finished_at is not None
        answer = bearer(a.contributor, a.tenant).get(f"{path}/runs/{run_id}").json["data"]
        assert answer["status"] == "lost" and LOST_SENTENCE in answer["error"]
        assert "owner" not in answer and "heartbeat_at" not in answer
        assert stream.ended.wait(5), "the reaper's wake did not end the stream"
        assert stream.frames[-1]["done"] is True and stream.frames[-1]["status"] == "lost"
        # Nobody will read its result: the command and what it started end through the
        # engine, not at their timeout (the sandbox and its files stay); once.
        assert runs.end_lost() == 1 and runs.end_lost() == 0
        sandbox = db.session.get(SandboxSession, session_id).sandbox_id
        left = DockerBackend({"host": DOCKER_HOST}).exec(
            sandbox, "ps -eo args | grep -c '^sleep 60' || true", timeout_sec=10)
        assert left.stdout.strip() == "0", left.stdout


def test_a_long_run_on_a_live_process_is_refreshed_and_never_lost(
        app, world, short_wait, short_heartbeats):
    stop = threading.Event()
    start_reaper(app, interval=0.2, stop=stop)  # the reaper thread, as a worker runs it
    try:
        run = world.member.post(world.url("/exec"), json={"command": "sleep 5"}).json["data"]
        assert run["status"] == "running"
        beats = set()
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            row = _row(app, run["id"])
            assert row.status == RunStatus.running, row.error
            beats.add(row.heartbeat_at)
            time.sleep(0.25)
        assert len(beats) >= 5, beats  # refreshed all along
        assert runs.reap_lost() == 0
        done = wait_run(world.member, world, run["id"])
    finally:
        stop.set()
    assert done["status"] == "succeeded"


def test_the_reaper_thread_marks_a_dead_owner_s_run_and_its_stream_replays_lost(
        app, world, short_wait, serve, short_heartbeats):
    run = world.member.post(world.url("/exec"), json={"command": "echo hi; sleep 4"}).json["data"]
    runs._heartbeats(app).discard(run["id"])  # its owner died: nobody refreshes it
    stop = threading.Event()
    start_reaper(app, interval=0.2, stop=stop)
    try:
        deadline = time.monotonic() + 10
        while _row(app, run["id"]).status == RunStatus.running:
            assert time.monotonic() < deadline, "never marked lost"
            time.sleep(0.2)
    finally:
        stop.set()
    assert _row(app, run["id"]).status == RunStatus.lost
    headers = token(app, world.a.contributor, world.a.tenant)
    stream = read_stream(serve(app), world.url(f"/runs/{run['id']}/events"), headers)
    assert stream.ended.wait(10)
    assert stream.frames[0] == {"stream": "stdout", "text": "hi\n"}
    assert stream.frames[-1]["status"] == "lost" and LOST_SENTENCE in stream.frames[-1]["error"]
    assert runs.drain(app, 10) == []


def test_flask_jobs_reap_marks_a_run_with_a_stale_heartbeat_lost(app, world):
    stale = utcnow() - timedelta(seconds=61)
    session = db.session.get(SandboxSession, world.session_id)
    db.session.add(ExecRun(id=str(uuid.uuid4()), tenant_id=session.tenant_id,
                           session_id=session.id, user_id=session.user_id, command="sleep 600",
                           timeout_sec=900, owner="gone-host:4242:0123456789abcdef",
                           heartbeat_at=stale, created_at=stale))
    db.session.commit()
    result = app.test_cli_runner().invoke(args=["jobs", "reap"])
    assert result.exit_code == 0, result.output
    assert "marked 1 command runs lost whose process stopped" in result.output
    assert "ended the commands of 0 lost runs" in result.output  # it never started one
    assert "leftovers of gone sandboxes on this host" in result.output
    (run,) = world.member.get(world.url("/runs")).json["data"]
    assert run["status"] == "lost" and run["finished_at"] is not None
