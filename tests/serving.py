"""The app served as `make run` serves it: a real gunicorn with the project's
gunicorn.conf.py on a free loopback port, for tests that measure pages under load."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def gunicorn(target: str, db_url: str, redis_url: str, env: dict[str, str] | None = None,
             log: Path | None = None) -> Iterator[str]:
    """`target` (a `module:factory()` of the tests) under gunicorn; yields the base URL.
    `env`: more variables for the server (a host's own directories); `log`: a file for its
    output (else discarded)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SANDLOT_TEST_DATABASE_URL": db_url,
           "SANDLOT_TEST_REDIS_URL": redis_url, **(env or {})}
    binary = Path(sys.executable).with_name("gunicorn")
    output = log.open("ab") if log else subprocess.DEVNULL
    server = subprocess.Popen(
        [str(binary), "--config", str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}",
         target], cwd=ROOT, env=env, stdout=output, stderr=output)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/login", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        server.kill()
        server.wait(timeout=10)
        if log:
            output.close()
        pytest.fail("gunicorn did not answer /login within 30 s")
    try:
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a request it could not end: no stray server
            server.kill()
            server.wait(timeout=10)
        if log:
            output.close()


def login_latency(base: str, rounds: int = 30) -> float:
    """Median seconds of `GET /login` over `rounds` sequential requests."""
    with httpx.Client(base_url=base, timeout=10) as client:
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            assert client.get("/login").status_code == 200
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


# What "pages stay fast" means in these tests: within 4x the idle median, or under a quarter
# of a second on a busy machine (the suite runs on two xdist workers, so another test may be
# using the CPU). The failures they guard against are seconds: pages waiting behind held
# threads (2.9 s and more before exec runs) or not answering at all.
FAST_FLOOR_SEC = 0.25


def assert_pages_stay_fast(idle: float, busy: float) -> None:
    assert busy < max(4 * idle, FAST_FLOOR_SEC), (idle, busy)
