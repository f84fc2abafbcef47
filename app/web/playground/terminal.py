"""A session's web terminal page (issue 26): xterm.js in the browser asks this route for
a one-time ticket and opens the WebSocket it names (app.api.terminals). A session with no
sandbox yet shows a "Start sandbox" button instead."""

from __future__ import annotations

from flask import flash, jsonify, redirect, render_template, request, session, url_for

from app.auth.guards import guard
from app.errors import AppError
from app.extensions import db
from app.models import BindingState, Role
from app.services.identity import login_sessions
from app.services.sessions import lifecycle as sessions
from app.services.sessions import terminals
from app.tenancy import current_tenant, principal
from app.web import bp


def _own(session_id):
    return sessions.get_session(current_tenant(), principal().user, str(session_id))


@bp.get("/playground/<uuid:session_id>/terminal")
@guard(Role.viewer)
def session_terminal(session_id):
    own = _own(session_id)
    doc = sessions.config_doc(own)
    return render_template("playground/terminal.html", session=own,
                           bound=own.binding_state == BindingState.bound,
                           gone=own.binding_state == BindingState.gone,
                           idle_sec=terminals.idle_seconds(doc),
                           backend=doc.get("sandbox_type", ""))


@bp.post("/playground/<uuid:session_id>/terminal/tickets")
@guard(Role.viewer)
def session_terminal_ticket(session_id):
    """JSON for the page's script: the ticket's answer (201) or the error envelope."""
    own = _own(session_id)
    try:
        ticket = terminals.issue_ticket(current_tenant(), principal().user, own,
                                        login_sid=session.get(login_sessions.SESSION_KEY))
    except AppError as exc:
        db.session.rollback()
        return jsonify(exc.envelope()), exc.status
    return jsonify(ticket.answer()), 201


@bp.post("/playground/<uuid:session_id>/start")
@guard(Role.viewer)
def session_start(session_id):
    own = _own(session_id)
    try:
        sessions.start_sandbox(current_tenant(), principal().user, own)
    except AppError as exc:
        db.session.rollback()
        flash(exc.message, "error")
    after = {"playground": "web.playground_session", "files": "web.session_files"}
    return redirect(url_for(after.get(request.form.get("next", ""), "web.session_terminal"),
                            session_id=own.id), code=303)
