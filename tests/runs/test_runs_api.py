"""Exec runs (issue 11 item 1): a long command answers 202 with a run that keeps its
output after the request ended, cancel kills what it started (even a `setsid` child),
foreign run ids are 404, and no config can make an exec longer than 600 s."""

from __future__ import annotations

import time
import uuid

from app.extensions import db
from app.models import ExecRun, RunStatus, SandboxConfig
from tests.runs.conftest import docker_config, finished, open_session, wait_run

EXEC_PATHS = True  # through the exec agent and through docker exec (tests/exec_paths.py)


def test_a_long_command_answers_202_and_its_output_lands_in_the_history(world, short_wait):
    started = time.monotonic()
    response = world.member.post(world.url("/exec"), json={
        "command": "echo begin; sleep 2; echo end; echo oops >&2; exit 3"})
    assert time.monotonic() - started < 2, "the request waited for the command"
    assert response.status_code == 202, response.json
    run = response.json["data"]
    assert run["status"] == "running" and run["command"].startswith("echo begin")
    done = wait_run(world.member, world, run["id"])
    assert done["status"] == "failed" and done["exit_code"] == 3
    assert done["stdout"] == "begin\nend\n" and done["stderr"] == "oops\n"
    assert done["duration_ms"] >= 2000 and done["finished_at"]
    quick = world.member.post(world.url("/exec"), json={"command": "echo quick"})
    assert finished(world.member, world, quick)["stdout"] == "quick\n"
    history = world.member.get(world.url("/runs")).json["data"]
    assert history[1]["id"] == run["id"] and history[0]["command"] == "echo quick"
    assert history[0]["status"] == "succeeded"
    first = world.member.get(world.url("/runs?limit=1")).json
    assert first["total"] == 2 and first["next_cursor"]
    page = world.member.get(world.url(f"/runs?limit=1&cursor={first['next_cursor']}")).json
    assert [r["id"] for r in page["data"]] == [run["id"]] and page["next_cursor"] is None
    assert world.member.get(world.url("/runs?limit=0")).status_code == 400


def test_output_is_stored_live_while_the_command_runs(world, short_wait):
    run = world.member.post(world.url("/exec"), json={
        "command": "echo first; sleep 3; echo second"}).json["data"]
    live = wait_run(world.member, world, run["id"], 10, until=lambda r: "first" in r["stdout"])
    assert live["status"] == "running" and live["stdout"] == "first\n"
    assert wait_run(world.member, world, run["id"])["stdout"] == "first\nsecond\n"


def _sleepers(engine, sandbox_id: str) -> list[str]:
    # No `ps` in the image: every process's argv from /proc.
    listing = engine.exec(sandbox_id, "for p in /proc/[0-9]*; do tr '\\0' ' ' "
                          "< $p/cmdline; echo; done", user="root").stdout
    return [line for line in listing.splitlines() if line.strip() == "sleep 300"]


def test_cancel_kills_the_whole_group_and_a_setsid_child(world, short_wait, engine):
    command = "setsid sh -c 'sleep 300' & sleep 300 & echo started; wait"
    run = world.member.post(world.url("/exec"), json={"command": command}).json["data"]
    live = wait_run(world.member, world, run["id"], 20, until=lambda r: "started" in r["stdout"])
    assert live["status"] == "running", live
    sandbox_id = world.member.get(world.url()).json["data"]["sandbox_id"]
    assert len(_sleepers(engine, sandbox_id)) == 2
    cancelled = world.member.post(world.url(f"/runs/{run['id']}/cancel"))
    assert cancelled.status_code == 202, cancelled.json
    done = wait_run(world.member, world, run["id"], 15)
    assert done["status"] == "cancelled", done
    assert _sleepers(engine, sandbox_id) == []
    again = world.member.post(world.url(f"/runs/{run['id']}/cancel"))
    assert again.status_code == 409 and again.json["error"]["code"] == "run_not_running"
    after = world.member.post(world.url("/exec"), json={"command": "echo still-usable"})
    assert finished(world.member, world, after)["stdout"] == "still-usable\n"


def test_foreign_and_other_members_runs_are_404(world, short_wait, bearer):
    a, b = world.a, world.b
    run = world.member.post(world.url("/exec"), json={"command": "sleep 1; echo mine"}) \
        .json["data"]
    other_member = bearer(a.viewer, a.tenant)
    own_session = open_session(other_member, world.config["id"])
    stranger = bearer(b.admin, b.tenant)
    admin = bearer(a.admin, a.tenant)
    paths = [f"/runs/{run['id']}", f"/runs/{run['id']}/events", "/runs"]
    for api in (other_member, stranger, admin):
        for path in paths:
            assert api.get(world.url(path)).status_code == 404, (api, path)
        assert api.post(world.url(f"/runs/{run['id']}/cancel")).status_code == 404
    # The run id under the other member's own session is not found either.
    assert other_member.get(f"/api/v1/sessions/{own_session}/runs/{run['id']}") \
        .status_code == 404
    assert world.member.get(world.url(f"/runs/{uuid.uuid4()}")).status_code == 404
    assert wait_run(world.member, world, run["id"])["stdout"] == "mine\n"


def test_no_config_makes_an_exec_longer_than_600_s(world, bearer):
    admin = bearer(world.a.admin, world.a.tenant)
    refused = admin.post("/api/v1/sandbox-configs", json={"name": "long", "config": {
        "sandbox_type": "docker", "default_timeout_sec": 86400}})
    assert refused.status_code == 400
    assert any(e["field"].endswith("default_timeout_sec")
               for e in refused.json["error"]["data"]["errors"]), refused.json
    # A config stored before the cap (86400) is clamped at exec time.
    config = docker_config(admin, "legacy")
    row = db.session.get(SandboxConfig, config["id"])
    row.config = {**row.config, "default_timeout_sec": 86400}
    db.session.commit()
    session_id = open_session(world.member, config["id"])
    response = world.member.post(f"/api/v1/sessions/{session_id}/exec",
                                 json={"command": "echo hi"})
    assert response.status_code == 200, response.json
    stored = db.session.get(ExecRun, response.json["data"]["run_id"])
    assert stored.timeout_sec == 600 and stored.status == RunStatus.succeeded


def test_stored_output_masks_resolved_env_values(world):
    response = world.member.post(world.url("/exec"), json={"command": "echo $GREETING"})
    run_id = response.json["data"]["run_id"]
    stored = world.member.get(world.url(f"/runs/{run_id}")).json["data"]
    assert "hello-from-config" not in stored["stdout"] and stored["stdout"] == "***\n"
    row = db.session.get(ExecRun, run_id)
    assert "hello-from-config" not in row.stdout + row.stderr + row.command


def test_past_the_per_workspace_bound_a_run_is_refused_not_queued(world, short_wait, app,
                                                                  monkeypatch):
    monkeypatch.setitem(app.config, "RUNS_PER_TENANT_MAX", 1)
    held = world.member.post(world.url("/exec"), json={"command": "sleep 30"})
    assert held.status_code == 202
    refused = world.member.post(world.url("/exec"), json={"command": "echo hi"})
    assert refused.status_code == 429 and refused.json["error"]["code"] == "quota_exceeded"
    assert refused.json["error"]["data"] == {"quota": "runs_per_workspace", "limit": 1,
                                             "used": 1}
    assert world.member.post(world.url(f"/runs/{held.json['data']['id']}/cancel")) \
        .status_code == 202
    assert wait_run(world.member, world, held.json["data"]["id"], 15)["status"] == "cancelled"
    deadline = time.monotonic() + 5  # the slot comes back as the run's thread ends
    while time.monotonic() < deadline:
        again = world.member.post(world.url("/exec"), json={"command": "echo hi"})
        if again.status_code != 429:
            break
        time.sleep(0.1)
    assert finished(world.member, world, again)["stdout"] == "hi\n"


def test_output_with_a_nul_byte_is_stored_with_the_byte_shown(world, short_wait):
    """Issue 22 item 6: on PostgreSQL (text cannot hold NUL) `printf 'a\\000b'` answered
    500 and stored no run, and a longer one stayed `running` with no output."""
    quick = world.member.post(world.url("/exec"), json={"command": "printf 'a\\000b'"})
    assert quick.status_code in (200, 202), quick.json
    done = finished(world.member, world, quick)
    assert done["status"] == "succeeded" and done["stdout"] == "a\ufffdb", done
    slow = world.member.post(world.url("/exec"), json={
        "command": "printf 'c\\000'; sleep 1; printf 'd\\000e' >&2"})
    assert slow.status_code == 202, slow.json
    done = finished(world.member, world, slow)
    assert done["status"] == "succeeded", done
    assert (done["stdout"], done["stderr"]) == ("c\ufffd", "d\ufffde")
    assert done["stdout_bytes"] == 2 and done["stderr_bytes"] == 3  # bytes as they came


def test_what_a_command_leaves_running_is_ended_unless_it_asks_to_keep_it(world, engine):
    """Issue 22 item 7: a `setsid` daemon left by one command read /proc/*/environ of the
    later commands and captured a member's value for another skill."""
    command = "setsid sh -c 'sleep 300' >/dev/null 2>&1 & sleep 300 >/dev/null 2>&1 & echo ok"
    left = world.member.post(world.url("/exec"), json={"command": command})
    assert finished(world.member, world, left)["stdout"] == "ok\n"
    sandbox_id = world.member.get(world.url()).json["data"]["sandbox_id"]
    assert _sleepers(engine, sandbox_id) == []
    kept = world.member.post(world.url("/exec"), json={"command": command,
                                                       "keep_processes": True})
    assert finished(world.member, world, kept)["stdout"] == "ok\n"
    assert len(_sleepers(engine, sandbox_id)) == 2  # asked for: a server between commands
    engine.exec(sandbox_id, "pkill sleep || kill $(pidof sleep)", user="root")


def test_a_run_says_how_many_files_it_left_in_workspace_output(world):
    wrote = world.member.post(world.url("/exec"), json={
        "command": "mkdir -p /workspace/output/deep && echo a > /workspace/output/a.txt && "
                   "echo b > /workspace/output/deep/b.txt && echo done"})
    stored = finished(world.member, world, wrote)
    assert stored["stdout"] == "done\n" and stored["new_output_files"] == 2
    if wrote.status_code == 200:  # the direct answer says it too
        assert wrote.json["data"]["new_files"] == 2
    # The count is not part of what the command printed, and a command that writes
    # nothing there (or fails) says 0.
    assert stored["stderr"] == ""
    quiet = finished(world.member, world, world.member.post(
        world.url("/exec"), json={"command": "echo x >&2; exit 4"}))
    assert (quiet["new_output_files"], quiet["stderr"], quiet["exit_code"]) == (0, "x\n", 4)
