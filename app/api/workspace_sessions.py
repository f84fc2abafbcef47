"""The workspace's sessions for admins (issue 11 item 6, decisions 12): every member's
sessions, listed and ended. Members use /sessions, which shows only their own."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import Field

from app.api import bp
from app.api._core import Out, doc, ok, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.auth.guards import FULL_ACCESS, guard
from app.errors import NotFound
from app.models import Role, SandboxConfig, SandboxSession
from app.services.sessions import ending, workspace
from app.tenancy import current_tenant, get_or_404, principal


class WorkspaceSessionsQuery(PageQuery):
    sandbox_config_id: str | None = Field(default=None, max_length=36,
                                          description="Only the sessions on this config")


class OwnerOut(Out):
    user_id: int
    display_name: str


class WorkspaceSessionOut(Out):
    id: str
    title: str
    sandbox_config_id: str
    sandbox_config_name: str
    owner: OwnerOut = Field(description="The member whose session it is")
    status: str = Field(description="`idle` (no sandbox yet), `starting`, `live` (bound to "
                        "a sandbox, which may be paused) or `gone` (its sandbox is missing "
                        "on its engine until its member starts a new one)")
    exec_count: int
    created_at: datetime
    last_used_at: datetime | None


class EndedOut(Out):
    session_id: str
    job_id: str | None = Field(description="The job removing the sandbox at its provider; "
                               "null when the queue was down (the sweeper removes it)")


def session_out(row: workspace.SessionRow) -> dict[str, Any]:
    session = row.session
    return project(WorkspaceSessionOut, {
        "id": session.id, "title": session.title, "sandbox_config_id": session.sandbox_config_id,
        "sandbox_config_name": row.config_name,
        "owner": {"user_id": row.owner_id, "display_name": row.owner_name},
        "status": row.status, "exec_count": session.exec_count,
        "created_at": session.created_at, "last_used_at": session.last_used_at})


def ended_out(ended: ending.Ended) -> dict[str, Any]:
    return project(EndedOut, {"session_id": ended.session_id, "job_id": ended.job_id})


def _config_filter(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        config_id = str(uuid.UUID(raw))
    except ValueError:
        raise NotFound("No such sandbox config in this workspace.") from None
    return get_or_404(SandboxConfig, config_id, "sandbox config").id


@bp.get("/workspace/sessions")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Every member's sessions in this workspace (admins), newest first, optionally on one "
     "config",
     query=WorkspaceSessionsQuery, response=WorkspaceSessionOut, many=True, errors=(400, 404))
def list_workspace_sessions():
    query = parse_query(WorkspaceSessionsQuery)
    config_id = _config_filter(query.sandbox_config_id)
    page = workspace.workspace_sessions_page(current_tenant(), config_id, window(query))
    return ok_page(page, session_out)


@bp.delete("/workspace/sessions/<uuid:session_id>")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("End any member's session (admins): the record closes now, its sandbox is removed by "
     "a job", response=EndedOut, errors=(404,))
def end_workspace_session(session_id):
    session = get_or_404(SandboxSession, str(session_id), "session")
    ended = ending.end_session(current_tenant(), principal(), session, "ended by admin")
    return ok(ended_out(ended))
