"""The app of every process of the test deployments (tests/multihost): web processes under
gunicorn, the `flask worker` and the engine's `flask node`. What they share comes in
SANDLOT_TEST_* variables: the test's database, Redis, the module's own job queue and the
S3 bundle store; what each keeps to itself (SKILL_BUNDLE_DIR here; the egress state, disk
and temporary directories through their own variables) is a directory of its own."""

from __future__ import annotations

import os

from flask import Flask

from app import create_app


def make_app() -> Flask:
    return create_app({
        "ENV": "testing",
        "SQLALCHEMY_DATABASE_URI": os.environ["SANDLOT_TEST_DATABASE_URL"],
        "REDIS_URL": os.environ["SANDLOT_TEST_REDIS_URL"],
        "JOB_QUEUE": os.environ["SANDLOT_TEST_JOB_QUEUE"],
        "SKILL_BUNDLE_DIR": os.environ["SANDLOT_TEST_BUNDLE_DIR"],
        "SKILL_BUNDLE_STORE": os.environ["SANDLOT_TEST_BUNDLE_STORE"],
        # The Docker engines this process owns: "*" (all) unless the test says (a web
        # host with none reaches the engine through a node, `flask node`).
        "SANDBOX_OWN_ENGINES": [name for name in os.environ.get(
            "SANDLOT_TEST_OWN_ENGINES", "*").split(",") if name],
        # A command still running after 2 s answers 202 and goes on off the request.
        "RUN_SYNC_WAIT_SECONDS": 2.0,
        "RUN_HEARTBEAT_SECONDS": 1,
        # Stops and heartbeats of an install show within the test.
        "SKILL_INSTALL_WATCH_SECONDS": 0.3,
        "SKILL_INSTALL_HEARTBEAT_SECONDS": 1,
    })
