"""The app for the gunicorn subprocess of the capacity test: the test's database and
Redis, handed over in SANDLOT_TEST_* variables (as tests/jobs/worker_app.py does)."""

from __future__ import annotations

import os

from flask import Flask

from app import create_app


def make_app() -> Flask:
    return create_app({
        "ENV": "testing",
        "SQLALCHEMY_DATABASE_URI": os.environ["SANDLOT_TEST_DATABASE_URL"],
        "REDIS_URL": os.environ["SANDLOT_TEST_REDIS_URL"],
        "JOB_QUEUE": "sandlot-test-streams-unused",
        # One admin holds all 200 streams of the capacity test: the process total is
        # what it measures, so the member's and the workspace's shares are the total.
        "STREAMS_PER_MEMBER": 224, "STREAMS_PER_WORKSPACE": 224,
    })
