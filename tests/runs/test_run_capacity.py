"""Long commands cannot take the app down (issue 11 item 1): 50 concurrent `sleep 10`
execs against a real gunicorn started with the project's gunicorn.conf.py. Every POST
answers 202 within a few seconds (before: each held its thread for the whole command),
GET /login stays within a few times its idle latency meanwhile, and every run ends
`succeeded` with its duration."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests import serving
from tests.runs.conftest import docker_config, open_session
from tests.streams.conftest import token

EXECS = 50


@pytest.fixture
def gunicorn(db_url, redis_url):
    with serving.gunicorn("tests.runs.server_app:make_app()", db_url, redis_url) as base:
        yield base


def test_50_long_execs_leave_login_fast_and_all_finish(app, two_tenants, bearer, gunicorn):
    a, _ = two_tenants
    config = docker_config(bearer(a.admin, a.tenant))
    session_id = open_session(bearer(a.contributor, a.tenant), config["id"])
    headers = token(app, a.contributor, a.tenant)
    url = f"{gunicorn}/api/v1/sessions/{session_id}"
    with httpx.Client(timeout=60, headers=headers) as client:  # the sandbox exists first
        first = client.post(url + "/exec", json={"command": "true"})
        assert first.status_code in (200, 202), first.text
        if first.status_code == 202:  # on a busy machine the sandbox start outlasts the wait
            run_url = f"{url}/runs/{first.json()['data']['id']}"
            deadline = time.monotonic() + 60
            while client.get(run_url).json()["data"]["status"] == "running":
                assert time.monotonic() < deadline, "the first exec never finished"
                time.sleep(0.3)
    idle = serving.login_latency(gunicorn)

    shared = httpx.Client(timeout=60, headers=headers,
                          limits=httpx.Limits(max_connections=EXECS + 5))

    def post(_: int) -> tuple[int, float, str]:
        started = time.perf_counter()
        response = shared.post(url + "/exec", json={"command": "sleep 10"})
        body = response.json()
        assert response.status_code == 202, body
        return response.status_code, time.perf_counter() - started, body["data"]["id"]

    with ThreadPoolExecutor(EXECS) as pool:
        posted = pool.map(post, range(EXECS))
        time.sleep(1)  # the POSTs are in flight or answered, the commands all running
        busy = serving.login_latency(gunicorn)
        answers = list(posted)
    shared.close()
    seconds = sorted(s for _, s, _ in answers)
    print(f"GET /login median: idle {idle * 1000:.1f} ms, with {EXECS} running execs "
          f"{busy * 1000:.1f} ms; POST exec median {statistics.median(seconds):.2f} s, "
          f"slowest {seconds[-1]:.2f} s")
    # Before runs every POST held its thread for the whole 10 s and answered 200. The
    # server waits 2 s for a result; the rest is CPU for 50 simultaneous starts on a
    # shared 2-core machine (docs/streams.md has the figures).
    assert [code for code, _, _ in answers] == [202] * EXECS
    assert statistics.median(seconds) < 7, seconds
    serving.assert_pages_stay_fast(idle, busy)
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=10, headers=headers) as client:
        pending = {run_id for _, _, run_id in answers}
        while pending and time.monotonic() < deadline:
            runs = client.get(url + "/runs?limit=100").json()["data"]
            done = {r["id"]: r for r in runs if r["status"] != "running"}
            pending -= done.keys()
            time.sleep(0.5)
        assert not pending, f"{len(pending)} runs still running after 60 s"
        runs = {r["id"]: r for r in client.get(url + "/runs?limit=100").json()["data"]}
    ended = [runs[run_id] for _, _, run_id in answers]
    assert all(r["status"] == "succeeded" and r["duration_ms"] >= 10_000 for r in ended)
