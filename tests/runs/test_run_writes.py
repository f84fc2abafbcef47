"""What a warm exec writes (issue 11 item 7): a command that ends within the request's
wait is stored with one INSERT, in the same transaction as the session's count, and
nothing else is written; before, a run's row was written four times (start, exec start,
first output, verdict), each with its own commit, and the session's count in a fifth."""

from __future__ import annotations

import threading

from sqlalchemy import event

from app.extensions import db
from tests.runs.conftest import wait_run

WRITES = ("INSERT", "UPDATE", "DELETE")


def _writes(app, run):
    """Statements that write, with the thread that sent them, while `run()` runs."""
    seen = []
    with app.app_context():
        engine = db.engine

    def statement(conn, cursor, sql, params, context, many):
        if sql.lstrip().upper().startswith(WRITES):
            seen.append((threading.current_thread().name, " ".join(sql.split()[:3])))

    event.listen(engine, "before_cursor_execute", statement)
    try:
        result = run()
    finally:
        event.remove(engine, "before_cursor_execute", statement)
    return result, seen


def test_a_warm_exec_writes_its_run_once_with_the_session_count(app, world):
    first = world.member.post(world.url("/exec"), json={"command": "true"})  # sandbox made
    assert first.status_code == 200, first.json
    before = world.member.get(world.url()).json["data"]

    response, seen = _writes(app, lambda: world.member.post(
        world.url("/exec"), json={"command": "echo warm"}))
    assert response.status_code == 200 and response.json["data"]["stdout"] == "warm\n"
    assert [what for _, what in seen] == ["INSERT INTO exec_runs",
                                          "UPDATE sandbox_sessions SET"], seen
    assert len({thread for thread, _ in seen}) == 1, seen  # one transaction's thread
    run = world.member.get(world.url(f"/runs/{response.json['data']['run_id']}")).json["data"]
    assert run["status"] == "succeeded" and run["stdout"] == "warm\n"
    after = world.member.get(world.url()).json["data"]
    assert after["exec_count"] == before["exec_count"] + 1


def test_a_run_past_the_wait_is_stored_before_its_202(app, world, short_wait):
    response, seen = _writes(app, lambda: world.member.post(
        world.url("/exec"), json={"command": "echo begin; sleep 2; echo end"}))
    assert response.status_code == 202, response.json
    assert ("INSERT INTO exec_runs" in [what for _, what in seen]), seen
    run = response.json["data"]
    assert run["status"] == "running"
    done = wait_run(world.member, world, run["id"])
    assert done["status"] == "succeeded" and done["stdout"] == "begin\nend\n"
    session = world.member.get(world.url()).json["data"]
    assert session["exec_count"] == 1
