"""Sessions and execution under /api/v1/sessions (decisions 7). Sessions are the caller's own;
an admin may also end any of the workspace's (decisions 12)."""

from __future__ import annotations

import dataclasses
import io
from datetime import datetime
from typing import Any

from flask import g, request, send_file
from pydantic import Field
from werkzeug.exceptions import RequestEntityTooLarge

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.api.runs import NEW_OUTPUT_FILES, EgressDenial, run_out
from app.api.workspace_sessions import EndedOut, ended_out
from app.auth.guards import guard
from app.errors import PayloadTooLarge, UnsupportedMediaType
from app.models import Role, SandboxSession
from app.services.sessions import ending, files, runs
from app.services.sessions import lifecycle as sessions
from app.services.skills.limits import MULTIPART_SLACK
from app.tenancy import current_tenant, get_or_404, principal


class SessionIn(Strict):
    sandbox_config_id: str = Field(min_length=1, max_length=36)
    title: str = Field(default="", max_length=200)


class SessionOut(Out):
    id: str
    sandbox_config_id: str
    title: str
    binding_state: str = Field(description=(
        "`none` (no sandbox yet), `creating`, `bound`, or `gone`: its sandbox is missing on "
        "the engine that held it, and commands are refused with `sandbox_gone` until "
        "`POST .../sandbox` starts a new one"))
    sandbox_id: str | None
    provider: str | None
    engine: str | None = Field(description=(
        "Docker: the engine that holds the sandbox, by the name the operator lists it under"))
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
    new_files: int | None = Field(default=None, description=NEW_OUTPUT_FILES)


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


@bp.post("/sessions/<uuid:session_id>/sandbox")
@guard(Role.viewer)
@doc("Start the session's sandbox without running a command: creates one when it has none "
     "or when its sandbox is `gone` (that sandbox's files are lost), resumes a paused one, "
     "and keeps a running one", response=SessionOut, errors=(404, 409, 429, 503))
def start_session_sandbox(session_id):
    session = _own(str(session_id))
    sessions.start_sandbox(current_tenant(), g.principal.user, session)
    return ok(project(SessionOut, session))


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



# -- the session's files (issue 26 item 3) -------------------------------------------------

class PathQuery(Strict):
    path: str | None = Field(default=None, max_length=files.PATH_MAX,
                             description="A path under /workspace (default /workspace)")


class FileEntryOut(Out):
    name: str
    path: str
    type: str = Field(description="file, folder or link (a link is listed, never followed)")
    size: int
    modified: datetime | None


class FolderOut(Out):
    path: str
    entries: list[FileEntryOut]


class DeletedFileOut(Out):
    path: str


def _entry_out(entry: files.Entry) -> dict:
    return project(FileEntryOut, dataclasses.asdict(entry))


@bp.get("/sessions/<uuid:session_id>/files")
@guard(Role.viewer)
@doc("A folder of your session's sandbox, under /workspace (links are listed, not "
     "followed)", query=PathQuery, response=FolderOut, errors=(400, 404, 409, 503))
def list_session_files(session_id):
    query = parse_query(PathQuery)
    path, entries = files.list_files(_own(str(session_id)), query.path)
    return ok({"path": path, "entries": [_entry_out(e) for e in entries]})


@bp.get("/sessions/<uuid:session_id>/files/content")
@guard(Role.viewer)
@doc("Download a file of your session's sandbox byte for byte, or a folder as a zip "
     f"(at most {files.FILE_MAX_BYTES >> 20} MiB, {files.ZIP_MAX_FILES} files)",
     query=PathQuery, binary=True, errors=(400, 404, 409, 413, 503))
def download_session_file(session_id):
    query = parse_query(PathQuery)
    got = files.download(current_tenant(), principal(), _own(str(session_id)), query.path)
    return send_file(io.BytesIO(got.data), as_attachment=True, download_name=got.name,
                     mimetype="application/zip" if got.zipped else "application/octet-stream")


@bp.post("/sessions/<uuid:session_id>/files")
@guard(Role.viewer)
@doc("Upload files (multipart, field `file`, repeatable) into /workspace/input or the "
     f"folder under it named by `path`; at most {files.UPLOAD_MAX_FILES} files and "
     f"{files.FILE_MAX_BYTES >> 20} MiB together", upload="file", response=FileEntryOut,
     many=True, status=201, errors=(400, 404, 409, 413, 415, 503))
def upload_session_files(session_id):
    request.max_content_length = files.FILE_MAX_BYTES + MULTIPART_SLACK
    session = _own(str(session_id))  # another's session is a 404 whatever the body
    if request.mimetype != "multipart/form-data":
        raise UnsupportedMediaType("Send the files as multipart/form-data in the field 'file'.")
    try:
        uploads = [(f.filename or "", f.read()) for f in request.files.getlist("file")]
        folder = request.form.get("path")
    except RequestEntityTooLarge:
        raise PayloadTooLarge(f"An upload may hold at most {files.FILE_MAX_BYTES >> 20} MiB.") \
            from None
    entries = files.upload(current_tenant(), principal(), session, folder, uploads)
    return ok([_entry_out(e) for e in entries], 201)


@bp.delete("/sessions/<uuid:session_id>/files")
@guard(Role.viewer)
@doc("Delete a file or folder of your session's sandbox under /workspace (a link is "
     "removed itself, never what it points to)", query=PathQuery, response=DeletedFileOut,
     errors=(400, 404, 409, 503))
def delete_session_file(session_id):
    query = parse_query(PathQuery)
    path = files.delete(current_tenant(), principal(), _own(str(session_id)), query.path)
    return ok({"path": path})
