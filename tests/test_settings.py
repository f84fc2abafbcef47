"""Every limit that guards shared capacity is a setting an operator sets in the environment
(issue 28 item 1), and so is JOB_QUEUE. The config classes read the environment when
app.config is imported, so one fresh interpreter with every setting changed builds the app
and reports what reached app.config."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.config import ROOT

# name -> a value other than its default, as the environment spells it and as it arrives.
SETTINGS: dict[str, tuple[str, object]] = {
    "SKILL_STREAMS_MAX": ("111", 111),
    "STREAMS_PER_WORKSPACE": ("33", 33),
    "STREAMS_PER_MEMBER": ("7", 7),
    "SKILL_STREAM_MAX_SECONDS": ("1800", 1800),
    "TERMINALS_MAX": ("12", 12),
    "TERMINALS_PER_MEMBER": ("4", 4),
    "TERMINALS_PER_WORKSPACE": ("9", 9),
    "TERMINALS_PER_SESSION": ("3", 3),
    "RUNS_MAX": ("64", 64),
    "RUNS_PER_MEMBER": ("8", 8),
    "RUNS_PER_TENANT_MAX": ("16", 16),
    "RUN_SYNC_WAIT_SECONDS": ("2.5", 2.5),
    "FILE_TRANSFERS_PER_MEMBER": ("3", 3),
    "FILE_TRANSFERS_PER_WORKSPACE": ("5", 5),
    "SANDBOX_CHECK_WAIT_SECONDS": ("1.5", 1.5),
    "JOB_TENANT_SHARE": ("2", 2),
    "INPROCESS_WORKERS": ("4", 4),
    "JOB_DEFAULT_TIMEOUT": ("900", 900),
    "QUOTA_CONCURRENT_INSTALLS_PER_WORKSPACE": ("2", 2),
    "QUOTA_LIVE_SANDBOXES_PER_MEMBER": ("6", 6),
    "QUOTA_LIVE_SANDBOXES_PER_WORKSPACE": ("30", 30),
    "JOB_QUEUE": ("sandlot-blue", "sandlot-blue"),
    "SKILL_BUNDLE_DIR_SHARED": ("true", True),
}

REPORT = """
import json
from app import create_app
from app.jobs.queue import queue_name
app = create_app({"ENV": "development", "SQLALCHEMY_DATABASE_URI": "sqlite://",
                  "REDIS_URL": "redis://127.0.0.1:9/0"})
names = json.loads(input())
print(json.dumps({"config": {name: app.config.get(name) for name in names},
                  "queue": queue_name(app),
                  "dispatcher_queue": app.extensions["sandlot_dispatcher"].name}))
"""


@pytest.fixture(scope="module")
def reached() -> dict:
    env = {**os.environ, **{name: raw for name, (raw, _) in SETTINGS.items()}}
    done = subprocess.run([sys.executable, "-c", REPORT], input=json.dumps(list(SETTINGS)),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_limit_set_in_the_environment_reaches_app_config(reached, name):
    assert reached["config"][name] == SETTINGS[name][1]


def test_job_queue_from_the_environment_is_the_queue_jobs_go_to(reached):
    assert reached["queue"] == reached["dispatcher_queue"] == "sandlot-blue"
