"""FLASK_APP for the real `flask worker` the crash test starts and kills: the test's
database, Redis queue and skill bundle directory, handed over in SANDLOT_TEST_* variables
(as tests/jobs/worker_app.py does)."""

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
        "SKILL_BUNDLE_STORE": "",
    })
