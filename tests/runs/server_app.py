"""The app for the gunicorn subprocess of the run capacity and lost-run tests: the test's
database and Redis (SANDLOT_TEST_* variables), a 2 s synchronous wait, so a POST exec of
a long command must answer 202 well before the command ends, and a 0.5 s run heartbeat."""

from __future__ import annotations

import os

from flask import Flask

from app import create_app


def make_app() -> Flask:
    return create_app({
        "ENV": "testing",
        "SQLALCHEMY_DATABASE_URI": os.environ["SANDLOT_TEST_DATABASE_URL"],
        "REDIS_URL": os.environ["SANDLOT_TEST_REDIS_URL"],
        "JOB_QUEUE": "sandlot-test-runs-unused",
        "RUN_SYNC_WAIT_SECONDS": 2.0,
        "RUNS_PER_MEMBER": 64,  # the capacity test's one member runs 50 at once
        "RUN_HEARTBEAT_SECONDS": 0.5,  # the lost-run test's threshold is 2 s
    })
