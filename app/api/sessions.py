"""Sessions and execution under /api/v1/sessions (decisions 7). Sessions are the caller's own;
an admin may also end any of the workspace's (decisions 12)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from flask import g
from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.api.runs import EgressDenial, run_out
from app.api.workspace_sessions import EndedOut, ended_out
from app.auth.guards import guard
from app.models import Role, SandboxSession
from app.services.sessions import ending, runs
from app.services.sessions import lifecycle as sessions
from app.tenancy import current_tenant, get_or_404


class SessionIn(Strict):
    sandbox_config_id: str = Field(min_length=1, max_length=36)
    title: str = Field(default="", max_length=200)


class SessionOut(Out):
    id: str
    sandbox_config_id: str
    title: str
    binding_state: str
    sandbox_id: str | None
    provider: str | None
    binding_version: int
    exec_count: int
    policy: dict[str, Any] | None = Field(
        description="The network policy the sandbox was created with (no secrets)")
    created_at: datetime
    sandbox_created_at: datetime | None
    last_used_at: datetime | None


class ExecIn(Strict):
    command: str = Field(min_length=1, max_length=sessions.COMMAND_MAX)
    skill: str | None = Field(default=None, max_length=100)
    timeout_sec: int | None = Field(default=None, ge=1, le=sessions.TIMEOUT_MAX)
    keep_processes: bool = Field(default=False, description=(
        "Docker: keep what the command leaves running (a server for the next command). "
        "By default it is ended when the command ends, so nothing of one command reads "
        "a later one's environment"))


class ExecOut(Out):
    run_id: str = Field(description="The run this exec is stored as (GET .../runs/:runId)")
    stdout: str
    stderr: str
    exit_code: int
    duration_ms: int
    timed_out: bool
    truncated: bool
    sandbox_id: str
    reused: bool = Field(description="True when the session's existing sandbox ran it")
    missing_env: list[str] | None = Field(
        default=None, description="With `skill`: required variables still unset (a run with "
        "any is refused with `missing_env`, so a run that happened lists none)")
    egress_denied: list[EgressDenial] | None = Field(
        default=None, description="Docker: the connections the egress gateway refused "
        "during this command, per host and port (the egress log has each one)")


def _own(session_id: str) -> SandboxSession:
    return sessions.get_session(current_tenant(), g.principal.user, session_id)


@bp.post("/sessions")
@guard(Role.viewer)
@doc("Open a session pinned to a sandbox config", request=SessionIn, response=SessionOut,
     status=201, errors=(400, 404))
def create_session():
    body = parse_body(SessionIn)
    session = sessions.create_session(current_tenant(), g.principal.user,
                                      body.sandbox_config_id, body.title)
    return ok(project(SessionOut, session), 201)


@bp.get("/sessions")
@guard(Role.viewer)
@doc("Your sessions in this workspace, newest first", query=PageQuery, response=SessionOut,
     many=True, errors=(400,))
def list_sessions():
    page = sessions.sessions_page(current_tenant(), g.principal.user,
                                  window(parse_query(PageQuery)))
    return ok_page(page, lambda session: project(SessionOut, session))


@bp.get("/sessions/<uuid:session_id>")
@guard(Role.viewer)
@doc("One of your sessions", response=SessionOut, errors=(404,))
def get_session(session_id):
    return ok(project(SessionOut, _own(str(session_id))))


@bp.delete("/sessions/<uuid:session_id>")
@guard(Role.viewer)
@doc("End a session: the record closes now and a job removes its sandbox (members end "
     "their own; admins any of the workspace's)", response=EndedOut, errors=(404,))
def delete_session(session_id):
    role = g.principal.role
    if role is not None and role.at_least(Role.admin):  # decisions 12: admins end any session
        session = get_or_404(SandboxSession, str(session_id), "session")
    else:
        session = _own(str(session_id))
    ended = ending.end_session(current_tenant(), g.principal, session)
    return ok(ended_out(ended))


@bp.post("/sessions/<uuid:session_id>/exec")
@guard(Role.viewer)
@doc("Run a command in the session's sandbox (created on first use, then reused). It "
     "runs off the request: the answer is its result when it ends within a few seconds "
     "(RUN_SYNC_WAIT_SECONDS, 5), else 202 with the run (follow .../runs/:runId/events)",
     request=ExecIn, response=ExecOut, errors=(400, 403, 404, 409, 423, 429, 503))
def exec_in_session(session_id):
    body = parse_body(ExecIn)
    session = _own(str(session_id))
    started = runs.start(current_tenant(), g.principal.user, session, body.command,
                         body.timeout_sec, skill=body.skill,
                         keep_processes=body.keep_processes)
    if started.outcome is None:
        assert started.run is not None  # read back for the 202
        return ok(run_out(started.run), 202)
    out = ExecOut.model_validate({**dataclasses.asdict(started.outcome),
                                  "run_id": started.run_id})
    return ok(out.model_dump(mode="json"))

