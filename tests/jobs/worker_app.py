"""FLASK_APP for the `flask worker --burst` subprocess in the RQ tests.

The subprocess must see the same database and Redis queue as the test that spawned it.
TestingConfig pins an in-memory SQLite and no Redis (so a developer's REDIS_URL can never
turn the test suite's app into an RQ app), so rather than teach the shared config to read
more environment, the test hands the worker its settings in SANDLOT_TEST_* variables and
this factory passes them to create_app exactly as the `app_factory` fixture does. It also
registers the test-only job kinds, which the worker must be able to run.
"""

from __future__ import annotations

import os

from flask import Flask

from app import create_app
from tests.jobs import kinds  # noqa: F401  (registers the test-only kinds)


def make_app() -> Flask:
    settings = {
        "ENV": "testing",
        "SQLALCHEMY_DATABASE_URI": os.environ["SANDLOT_TEST_DATABASE_URL"],
        "REDIS_URL": os.environ["SANDLOT_TEST_REDIS_URL"],
        "JOB_QUEUE": os.environ["SANDLOT_TEST_JOB_QUEUE"],
    }
    if os.environ.get("SANDLOT_TEST_DOCKER_ENGINES"):  # a test's extra engines (a hung one)
        settings["SANDBOX_DOCKER_ENGINES"] = os.environ["SANDLOT_TEST_DOCKER_ENGINES"]
    if os.environ.get("SANDLOT_TEST_JOB_HEARTBEAT_SECONDS"):  # a test's shorter beats
        settings["JOB_HEARTBEAT_SECONDS"] = int(os.environ["SANDLOT_TEST_JOB_HEARTBEAT_SECONDS"])
    return create_app(settings)
