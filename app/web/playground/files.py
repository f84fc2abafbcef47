"""A session's files (issue 26 item 3): the folders under /workspace of the session's
sandbox, downloads (a folder as a zip), uploads into /workspace/input and deletes.
Plain forms and links: everything works without JavaScript (a delete without it asks on
a page of its own; with it, htmx asks in place)."""

from __future__ import annotations

import io
import posixpath

from flask import flash, redirect, render_template, request, send_file, url_for
from werkzeug.exceptions import RequestEntityTooLarge

from app.auth.guards import guard
from app.errors import AppError
from app.extensions import db, htmx
from app.models import Role
from app.services.sessions import files
from app.services.sessions import lifecycle as sessions
from app.services.skills.limits import MULTIPART_SLACK
from app.tenancy import current_tenant, principal
from app.web import bp

# A session without a sandbox (yet, or any more) is a state of the page, not a failed request.
QUIET = ("sandbox_not_bound", "sandbox_gone")


def _own(session_id):
    return sessions.get_session(current_tenant(), principal().user, str(session_id))


def _crumbs(path: str) -> list[tuple[str, str]]:
    """(name, path) from /workspace down to `path`."""
    parts = path.removeprefix(files.WORKSPACE).strip("/").split("/")
    crumbs, here = [("workspace", files.WORKSPACE)], files.WORKSPACE
    for part in filter(None, parts):
        here = posixpath.join(here, part)
        crumbs.append((part, here))
    return crumbs


def _back(session_id, path: str):
    return redirect(url_for("web.session_files", session_id=session_id, path=path), code=303)


@bp.get("/playground/<uuid:session_id>/files")
@guard(Role.viewer)
def session_files(session_id):
    session = _own(session_id)
    path, entries, problem = request.args.get("path") or files.WORKSPACE, [], None
    try:
        path, entries = files.list_files(session, path)
    except AppError as exc:
        db.session.rollback()
        problem = exc
        path = files.WORKSPACE if exc.code == "validation_failed" else path
    upload_to = path if path.startswith(files.INPUT) else files.INPUT
    return render_template("playground/files.html", session=session, path=path,
                           entries=entries, crumbs=_crumbs(path), problem=problem,
                           upload_to=upload_to, limits=files), \
        problem.status if problem is not None and problem.code not in QUIET else 200


@bp.get("/playground/<uuid:session_id>/files/download")
@guard(Role.viewer)
def session_file_download(session_id):
    session = _own(session_id)
    try:
        got = files.download(current_tenant(), principal(), session, request.args.get("path"))
    except AppError as exc:
        db.session.rollback()
        flash(exc.message, "error")
        return _back(session_id, posixpath.dirname(request.args.get("path") or "") or
                     files.WORKSPACE)
    return send_file(io.BytesIO(got.data), as_attachment=True, download_name=got.name,
                     mimetype="application/zip" if got.zipped else "application/octet-stream")


@bp.post("/playground/<uuid:session_id>/files/upload")
@guard(Role.viewer)
def session_file_upload(session_id):
    request.max_content_length = files.FILE_MAX_BYTES + MULTIPART_SLACK
    session = _own(session_id)
    try:
        folder = request.form.get("path") or files.INPUT
        uploads = [(f.filename or "", f.read()) for f in request.files.getlist("file")
                   if f.filename]
        entries = files.upload(current_tenant(), principal(), session, folder, uploads)
    except RequestEntityTooLarge:
        flash(f"An upload may hold at most {files.FILE_MAX_BYTES >> 20} MiB.", "error")
        return _back(session_id, files.INPUT)
    except AppError as exc:
        db.session.rollback()
        flash(exc.message, "error")
        return _back(session_id, files.INPUT)
    names = ", ".join(e.name for e in entries)
    flash(f"Uploaded {names} to {posixpath.dirname(entries[0].path)}.", "success")
    return _back(session_id, posixpath.dirname(entries[0].path))


@bp.route("/playground/<uuid:session_id>/files/delete", methods=["GET", "POST"])
@guard(Role.viewer)
def session_file_delete(session_id):
    """GET (no JavaScript): a page that asks; POST with `confirmed`: delete."""
    session = _own(session_id)
    path = files.workspace_path(request.values.get("path"))
    if request.method == "GET" or not request.form.get("confirmed"):
        return render_template("playground/files_delete.html", session=session, path=path)
    try:
        files.delete(current_tenant(), principal(), session, path)
    except AppError as exc:
        db.session.rollback()
        flash(exc.message, "error")
    else:
        flash(f"Deleted {path}.", "success")
    back = url_for("web.session_files", session_id=session_id, path=posixpath.dirname(path))
    if htmx:  # a whole page again (htmx would follow a 303 inside its own request)
        return "", 204, {"HX-Redirect": back}
    return redirect(back, code=303)
