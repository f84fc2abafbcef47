"""Exec runs of a session under /api/v1/sessions/:id/runs (issue 11 item 1).

Runs are read through the caller's own session: another member's or another
workspace's run id is a 404, like their sessions.
"""

from __future__ import annotations

from datetime import datetime

from flask import Response, g, stream_with_context
from pydantic import Field

from app.api import bp
from app.api._core import Out, doc, ok, parse_query, project
from app.api.install_streams import stream_slot
from app.api.paging import PageQuery, ok_page, window
from app.auth.guards import guard
from app.models import ExecRun, Role, SandboxSession
from app.services import wakeups
from app.services.sessions import lifecycle as sessions
from app.services.sessions import run_stream, runs
from app.services.skills.installs.stream import HEADERS
from app.tenancy import current_tenant

ONE_RUN = "/sessions/<uuid:session_id>/runs/<uuid:run_id>"


class EgressDenial(Out):
    host: str = Field(description="The name the connection presented (SNI or Host), else "
                      "the address")
    port: int
    count: int


NEW_OUTPUT_FILES = ("How many files the command created or changed under /workspace/output "
                    "(GET .../files?path=/workspace/output lists them; at most 1000 counted); "
                    "null when it could not be told")


class RunOut(Out):
    id: str
    session_id: str
    command: str
    skill: str | None
    status: str = Field(description="running, succeeded, failed, timed_out, cancelled or "
                        "lost (the server running it stopped, so its result is unknown; "
                        "the sandbox is kept)")
    exit_code: int | None
    duration_ms: int | None
    timeout_sec: int
    stdout: str = Field(description="Head and tail, at most 64 KiB in all; a marker says "
                        "how many bytes were left out between them")
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool
    egress_denied: list[EgressDenial] | None = Field(
        default=None, description="Docker: the connections the egress gateway refused "
        "during this command, per host and port (the egress log has each one)")
    new_output_files: int | None = Field(default=None, description=NEW_OUTPUT_FILES)
    error: str | None
    created_at: datetime
    finished_at: datetime | None


def own_session(session_id: str) -> SandboxSession:
    return sessions.get_session(current_tenant(), g.principal.user, session_id)


def _run(session_id, run_id) -> tuple[SandboxSession, ExecRun]:
    session = own_session(str(session_id))
    return session, runs.get_run(session, str(run_id))


def run_out(run: ExecRun) -> dict:
    return project(RunOut, run)


@bp.get("/sessions/<uuid:session_id>/runs")
@guard(Role.viewer)
@doc("The session's command runs, newest first", query=PageQuery, response=RunOut, many=True,
     errors=(400, 404))
def list_runs(session_id):
    query = parse_query(PageQuery)
    session = own_session(str(session_id))
    return ok_page(runs.runs_page(session, window(query)), run_out)


@bp.get(ONE_RUN)
@guard(Role.viewer)
@doc("One command run: status, exit code and its stored output", response=RunOut,
     errors=(404,))
def get_run(session_id, run_id):
    return ok(run_out(_run(session_id, run_id)[1]))


@bp.post(f"{ONE_RUN}/cancel")
@guard(Role.viewer)
@doc("Stop a running command and every process it started; the run becomes cancelled",
     response=RunOut, errors=(404, 409, 503))
def cancel_run(session_id, run_id):
    session, run = _run(session_id, run_id)
    return ok(run_out(runs.cancel(session, run)), 202)


@bp.get(f"{ONE_RUN}/events")
@guard(Role.viewer)
@doc("A run's output as server-sent events: `event: message` frames {stream, text} (or "
     "{stream, omitted: true} once past the stored cap), then {done: true, status, "
     "exit_code, duration_ms, truncated, error}", errors=(404, 429, 503), stream=True)
def run_events(session_id, run_id):
    _, run = _run(session_id, run_id)
    slot = stream_slot()
    subscription = wakeups.subscription(runs.channel(run.id))
    waiter = subscription.__enter__()
    run_id_text = run.id

    def closed() -> None:
        slot.release()
        subscription.__exit__(None, None, None)

    try:
        response = Response(stream_with_context(run_stream.follow(run_id_text, waiter)),
                            mimetype="text/event-stream", headers=HEADERS)
    except BaseException:
        closed()
        raise
    response.call_on_close(closed)
    return response
