"""The Playground's runs (issue 11 item 1): a command that outlives the request shows as
running, with its elapsed time, its output so far and a Stop button, in a fragment the
page polls once a second until the run ends; the session's history is read from the runs
table, so it survives a reload."""

from __future__ import annotations

from typing import Any

from flask import flash, redirect, render_template, request, url_for

from app.auth.guards import guard
from app.errors import AppError
from app.extensions import db, htmx
from app.models import ExecRun, Role, RunStatus, SandboxSession
from app.models.types import utcnow
from app.services.sandboxes import egress_access
from app.services.sessions import lifecycle, runs
from app.tenancy import current_tenant, principal
from app.web import bp
from app.web._helpers import notice

HISTORY = 20
STATUS_LABELS = {RunStatus.running: "Running", RunStatus.succeeded: "Succeeded",
                 RunStatus.failed: "Failed", RunStatus.timed_out: "Timed out",
                 RunStatus.cancelled: "Stopped", RunStatus.lost: "Lost"}


def run_view(run: ExecRun) -> dict[str, Any]:
    """What a transcript entry of a stored run shows."""
    running = run.status == RunStatus.running
    end = run.finished_at or utcnow()
    return {"id": run.id, "session_id": run.session_id, "command": run.command,
            "status": run.status.value, "label": STATUS_LABELS[run.status],
            "running": running, "exit_code": run.exit_code,
            "elapsed_s": max(0, int((end - run.created_at).total_seconds())),
            "duration_ms": run.duration_ms, "stdout": run.stdout, "stderr": run.stderr,
            "truncated": run.truncated, "error": run.error,
            "egress_denied": run.egress_denied or [],
            "new_output_files": run.new_output_files,
            "cancel_requested": run.cancel_requested,
            "can_stop": running and not run.cancel_requested, "skill": run.skill,
            "sandbox_id": run.sandbox_id, "created_at": run.created_at}


def history(session: SandboxSession) -> list[dict[str, Any]]:
    """The session's latest runs, oldest first (as a transcript reads)."""
    return [run_view(r) for r in reversed(runs.list_runs(session, HISTORY))]


def last_run(session: SandboxSession, entries: list[dict[str, Any]]) -> dict[str, bool] | None:
    """The header's "Last run" read from the stored runs (`history`): whether the latest
    run that reached a sandbox found it there (the sandbox was bound before the run began)
    or started it. None when that sandbox is no longer the session's (it cannot tell)."""
    for run in reversed(entries):
        if run["running"] or not run["sandbox_id"]:
            continue
        if run["sandbox_id"] != session.sandbox_id or session.sandbox_created_at is None:
            return None
        return {"reused": session.sandbox_created_at < run["created_at"]}
    return None


def _entry(run: ExecRun):
    """A run's transcript entry; once it has ended, the page's header is told (an
    `run-ended` event: the binding facts and the session's row load again)."""
    view = run_view(run)
    headers = {} if view["running"] else {"HX-Trigger": "run-ended"}
    return render_template("playground/_exec_run.html", run=view), 200, headers


def _own_run(session_id, run_id) -> tuple[SandboxSession, ExecRun]:
    session = lifecycle.get_session(current_tenant(), principal().user, str(session_id))
    return session, runs.get_run(session, str(run_id))


@bp.get("/playground/<uuid:session_id>/runs/<uuid:run_id>")
@guard(Role.viewer)
def playground_run(session_id, run_id):
    _, run = _own_run(session_id, run_id)
    return _entry(run)


@bp.post("/playground/<uuid:session_id>/runs/<uuid:run_id>/stop")
@guard(Role.viewer)
def playground_stop_run(session_id, run_id):
    session, run = _own_run(session_id, run_id)
    try:
        runs.cancel(session, run)
    except AppError as err:
        db.session.rollback()
        body, status, headers = _entry(run)
        return notice(body, err.message, "error"), status, headers
    return _entry(run)


@bp.post("/playground/<uuid:session_id>/egress-access")
@guard(Role.viewer)
def playground_egress_access(session_id):
    """Ask for a host the run's egress policy refused (issue 24 item 5)."""
    tenant, user = current_tenant(), principal().user
    session = lifecycle.get_session(tenant, user, str(session_id))
    host = request.form.get("host", "")
    try:
        asked = egress_access.request_access(tenant, user, session, host,
                                             request.form.get("reason", ""))
    except AppError as exc:
        db.session.rollback()
        if not htmx:
            flash(exc.message, "error")
            return redirect(url_for("web.playground_session", session_id=session.id), 303)
        return render_template("playground/_access_request.html", asked=None, host=host[:253],
                               session_id=session.id, error=exc.message, run_id="retry",
                               loop_index=0)
    if not htmx:
        flash(f"Asked for {asked.host}: an admin will see it on the Egress page.", "success")
        return redirect(url_for("web.playground_session", session_id=session.id), 303)
    return render_template("playground/_access_request.html", asked=asked)
