"""Fixtures for the job system: apps with their own dispatcher, a real Redis, a real worker.

Redis tests need TEST_REDIS_URL (`bash scripts/services.sh start`, then
`eval "$(bash scripts/services.sh env)"`). Without it they skip locally and fail under CI.
Each RQ test gets its own queue name, so runs sharing the Redis never take each other's jobs.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask

from app.extensions import db
from app.jobs.queue import queue_name
from app.jobs.worker import run_worker
from tests.jobs import kinds  # noqa: F401  (registers the test-only kinds)
from tests.jobs.helpers import delete_queue

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def make_app(app_factory) -> Iterator[Callable[..., Flask]]:
    """Build apps with config overrides; stop their job threads and close their pools after."""
    built: list[Flask] = []

    def build(**overrides) -> Flask:
        app = app_factory(**overrides)
        built.append(app)
        return app

    yield build
    for app in built:
        dispatcher = app.extensions["sandlot_dispatcher"]
        if hasattr(dispatcher, "shutdown"):
            dispatcher.shutdown()
        with app.app_context():
            db.engine.dispose()


@pytest.fixture
def api(bearer):
    """An API client of `app` with the bearer token of `user` in `tenant`."""

    def make(app: Flask, user, tenant):
        return dataclasses.replace(bearer(user, tenant), client=app.test_client())

    return make


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        why = ("TEST_REDIS_URL is not set: run `bash scripts/services.sh start` and "
               "`eval \"$(bash scripts/services.sh env)\"`")
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI is set, so Redis tests may not skip)")
        pytest.skip(why)
    from redis import Redis

    try:
        Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:  # set but unreachable is a broken setup, never a skip
        pytest.fail(f"TEST_REDIS_URL={url} does not answer PING: {exc}")
    return url


@pytest.fixture
def rq_app(make_app, redis_url) -> Iterator[Flask]:
    """An app that enqueues on the real Redis, on a queue of its own (deleted afterwards)."""
    app = make_app(REDIS_URL=redis_url, JOB_QUEUE=f"sandlot-test-{uuid.uuid4().hex[:12]}")
    yield app
    delete_queue(app)


@pytest.fixture
def worker_subprocess(db_url) -> Callable[[Flask], subprocess.CompletedProcess]:
    """Run the real `flask worker --burst` CLI against an app's database and queue."""

    def run(app: Flask) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "FLASK_APP": "tests.jobs.worker_app:make_app()",
            "PYTHONPATH": str(ROOT),
            "SANDLOT_TEST_DATABASE_URL": db_url,
            "SANDLOT_TEST_REDIS_URL": app.config["REDIS_URL"],
            "SANDLOT_TEST_JOB_QUEUE": queue_name(app),
        }
        flask = Path(sys.executable).with_name("flask")
        done = subprocess.run([str(flask), "worker", "--burst"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"flask worker failed:\n{done.stdout}\n{done.stderr}"
        return done

    return run


@pytest.fixture
def worker_processes(db_url) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start long-running `flask worker` processes on an app's queue (`start(app, **env)`,
    env as SANDLOT_TEST_* names without the prefix); any still running at the end are
    killed, and their registrations go with the queue (helpers.delete_queue)."""
    started: list[subprocess.Popen] = []

    def start(app: Flask, **settings: str) -> subprocess.Popen:
        env = {**os.environ, "FLASK_APP": "tests.jobs.worker_app:make_app()",
               "PYTHONPATH": str(ROOT), "SANDLOT_TEST_DATABASE_URL": db_url,
               "SANDLOT_TEST_REDIS_URL": app.config["REDIS_URL"],
               "SANDLOT_TEST_JOB_QUEUE": queue_name(app),
               **{f"SANDLOT_TEST_{name}": value for name, value in settings.items()}}
        flask = Path(sys.executable).with_name("flask")
        worker = subprocess.Popen([str(flask), "worker"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)


@pytest.fixture
def worker_in_process() -> Callable[[Flask], None]:
    """`run_worker(app, burst=True)` in this process (RQ's SimpleWorker, SIGALRM timeouts).

    The worker installs SIGINT/SIGTERM handlers for its warm shutdown; put pytest's back.
    """

    def run(app: Flask) -> None:
        saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            with app.app_context():
                run_worker(app, burst=True)
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)

    return run
