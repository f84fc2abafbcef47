"""Issue 11 item 5: an install's commands together end before the job's time limit.

Each command may run SKILL_INSTALL_COMMAND_TIMEOUT (at most 600 s), but a plan is not
limited in its number of commands: the run caps every command at what is left of the
job's limit (less a margin for the image commit), so the job's own blocking calls end
before the dispatcher's limit, which matters in process, where a thread cannot be killed.
"""

from __future__ import annotations

import time

from app.services import job_limits
from app.services.skills.installs import run as install_run
from tests.installs.conftest import docker_config, install_zip, skill_zip, wait_for


def test_an_install_stops_its_commands_at_the_jobs_limit(world, app, monkeypatch):
    monkeypatch.setitem(app.config, "SKILL_INSTALL_COMMAND_TIMEOUT", 600)
    monkeypatch.setitem(job_limits.LIMITS, "install_skill", install_run.COMMANDS_MARGIN_SEC + 3)
    admin = world["admin"]
    config = docker_config(admin)
    script = b"#!/bin/sh\necho started\nsleep 600\n"
    started = time.monotonic()

    skill_id = install_zip(admin, config["id"], skill_zip("slow", {"install.sh": script})
                           ).json["data"]["skill_id"]
    row = wait_for(skill_id)

    assert time.monotonic() - started < 60
    assert (row.status, row.error) == (
        "failed", f"The run used up its {install_run.COMMANDS_MARGIN_SEC + 3} s time limit "
                  "before its commands finished.")
