"""Playground: open a session on a sandbox config, run commands in its one persistent
sandbox and read the output (decisions 7).

Sessions are the caller's own: another member's session id is a 404, never a 403
(`sessions.get_session`). Each command is a stored run (app.services.sessions.runs): the
transcript opens with the session's latest runs, and a long one polls until it ends
(app.web.playground.runs).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from flask import flash, redirect, render_template, request, url_for
from flask_wtf import FlaskForm
from wtforms import SelectField, StringField
from wtforms.validators import DataRequired, Length, ValidationError

from app.auth.guards import guard
from app.errors import AppError, ValidationFailed
from app.extensions import db, htmx
from app.models import BindingState, Role, SandboxConfig, SandboxSession
from app.services.sandboxes import configs as sandbox_configs
from app.services.sandboxes.network_policy import DENY_ALL
from app.services.sessions import ending, runs
from app.services.sessions import lifecycle as sessions
from app.services.sessions.lifecycle import ExecOutcome
from app.services.skills import installed
from app.tenancy import current_tenant, principal
from app.web import bp
from app.web._helpers import attach_error, notice
from app.web.playground import runs as playground_runs
from app.web.sandboxes.configs import KIND_LABELS

FIELD_LABELS = {"command": "Command", "timeout_sec": "Timeout"}
HINTS = {"workspace_scripts_disabled": "An admin can turn scripts back on under Sandboxes."}
SESSION_PATH = re.compile(r"/playground/([0-9a-fA-F-]{36})/?")


def _no_nul(form: FlaskForm, field: StringField) -> None:
    if "\0" in (field.data or ""):
        raise ValidationError("Remove the NUL character.")


class OpenSessionForm(FlaskForm):
    config_id = SelectField("Sandbox config",
                            validators=[DataRequired(message="Choose a sandbox config.")])
    title = StringField("Title", validators=[Length(max=200), _no_nul])

    def __init__(self, configs: list[SandboxConfig], **kwargs):
        super().__init__(**kwargs)
        self.config_id.choices = [
            (c.id, f"{c.name} · {KIND_LABELS.get(c.sandbox_type, c.sandbox_type)}")
            for c in configs]


@dataclass(frozen=True)
class Run:
    """One transcript entry: a command and either its outcome or the error that stopped it."""

    command: str
    outcome: ExecOutcome | None = None
    error: AppError | None = None
    skill: str | None = None

    @property
    def problems(self) -> list[str]:
        if isinstance(self.error, ValidationFailed) and self.error.errors:
            return [f"{FIELD_LABELS.get(e.get('field', ''), 'Input')}: {e['message']}"
                    for e in self.error.errors]
        return [self.error.message] if self.error else []

    @property
    def hint(self) -> str | None:
        return HINTS.get(self.error.code) if self.error else None


# -- what the templates show -----------------------------------------------------------------

def short_id(sandbox_id: str | None) -> str:
    return (sandbox_id or "")[:12]


@bp.app_template_filter("ms")
def format_ms(ms: int) -> str:
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


@bp.app_template_filter("output")
def output_text(text: str) -> str:
    """Output as a terminal shows it: the final newline ends the last line, adds none."""
    return text[:-1] if text.endswith("\n") else text


def policy_summary(policy: dict[str, Any] | None) -> str:
    """The network policy a sandbox was created with, in one line."""
    if not policy:
        return "Fixed when the sandbox is created"
    allowed = len(policy.get("allow_out") or [])
    denied = len([d for d in policy.get("deny_out") or [] if d != DENY_ALL])
    if policy.get("allow_internet_access"):
        text = f"Egress open · {denied} denied" if denied else "Egress open"
    else:
        text = f"Default deny · {allowed} allowed" if allowed else "No internet access"
    rules = int(policy.get("cube_rules") or 0) + int(policy.get("e2b_host_rules") or 0)
    if rules:
        text += f" · {rules} rule{'s' if rules > 1 else ''}"
    return text


def session_view(session: SandboxSession, configs: dict[str, SandboxConfig]) -> dict[str, Any]:
    """What a list row and the header read: no secret of the config is touched."""
    config = configs.get(session.sandbox_config_id)
    kind = config.sandbox_type if config else (session.provider or "")
    return {
        "id": session.id, "title": session.title or f"Session {session.id[:8]}",
        "config_name": config.name if config else "Deleted config", "kind": kind,
        "kind_label": KIND_LABELS.get(kind or "", "Unknown"), "live_config": config is not None,
        "state": session.binding_state.value, "bound": session.binding_state == BindingState.bound,
        "sandbox_id": session.sandbox_id, "sandbox_short": short_id(session.sandbox_id),
        "sandbox_created_at": session.sandbox_created_at, "exec_count": session.exec_count,
        "created_at": session.created_at, "last_used_at": session.last_used_at,
        "policy": policy_summary(session.policy),
        "default_timeout": (config.config.get("default_timeout_sec") if config else None)
        or sessions.DEFAULT_EXEC_TIMEOUT,
        "skills": installed.runnable_names(config.id) if config else [],
    }


def _context(selected: SandboxSession | None = None, form: OpenSessionForm | None = None,
             **extra: Any) -> dict[str, Any]:
    tenant, user = current_tenant(), principal().user
    configs = sandbox_configs.list_configs(tenant)
    by_id = {c.id: c for c in configs}
    rows = [session_view(s, by_id) for s in sessions.list_sessions(tenant, user)]
    history = playground_runs.history(selected) if selected else []
    last = playground_runs.last_run(selected, history) if selected else None
    return {"tenant": tenant, "form": form or OpenSessionForm(configs, formdata=None),
            "has_configs": bool(configs), "rows": rows,
            "selected_id": selected.id if selected else None,
            "current": session_view(selected, by_id) if selected else None,
            "history": history, "runs": [], "command": "", "timeout": "", "skill": "",
            "last": last, **extra}


def _page(selected: SandboxSession | None, status: int = 200, **extra: Any):
    """The whole page; for htmx, the two panes (switching sessions swaps them)."""
    template = "playground/_layout.html" if htmx else "playground/index.html"
    return render_template(template, **_context(selected, **extra)), status


def _own(session_id: uuid.UUID | str) -> SandboxSession:
    return sessions.get_session(current_tenant(), principal().user, str(session_id))


def _viewing() -> str | None:
    """The session the page on screen shows (an htmx request names its page's URL)."""
    match = SESSION_PATH.fullmatch(urlsplit(htmx.current_url or "").path) if htmx else None
    return match.group(1).lower() if match else None


# -- pages -----------------------------------------------------------------------------------

@bp.get("/playground")
@guard(Role.viewer)
def playground():
    return _page(None)


@bp.get("/playground/<uuid:session_id>")
@guard(Role.viewer)
def playground_session(session_id):
    return _page(_own(session_id))


@bp.post("/playground")
@guard(Role.viewer)
def open_playground_session():
    tenant, user = current_tenant(), principal().user
    configs = sandbox_configs.list_configs(tenant)
    form = OpenSessionForm(configs)
    status = 400
    if form.validate_on_submit():
        try:
            session = sessions.create_session(tenant, user, form.config_id.data,
                                              form.title.data or "")
        except AppError as err:
            attach_error(form, err)
            status = err.status
        else:
            return _opened(session)
    if htmx:  # only the form comes back: the transcript on screen stays
        context = {"form": form, "has_configs": bool(configs), "tenant": tenant}
        return (render_template("playground/_open_form.html", **context), status,
                {"HX-Retarget": "#open-session", "HX-Reswap": "outerHTML"})
    return _page(None, status, form=form)


def _opened(session: SandboxSession):
    target = url_for("web.playground_session", session_id=session.id)
    message = "Session opened. Its sandbox starts with the first command."
    if not htmx:
        flash(message, "success")
        return redirect(target)
    body = render_template("playground/_layout.html", **_context(session))
    return notice(body, message), 200, {"HX-Push-Url": target}


@bp.post("/playground/<uuid:session_id>/end")
@guard(Role.viewer)
def end_playground_session(session_id):
    session = _own(session_id)
    ended = session.id
    # The record closes now and a job removes the sandbox, so a slow or unreachable
    # provider never holds this request nor keeps the session open (issue 11 item 6).
    ending.end_session(current_tenant(), principal(), session)
    message = "Session ended; its sandbox is being removed."
    if not htmx:
        flash(message, "success")
        return redirect(url_for("web.playground"))
    viewing = _viewing()
    return _ended(message, None if viewing == ended else viewing)


def _ended(message: str, viewing: str | None, status: int = 200, category: str = "success"):
    """The refreshed list; when the session on screen is gone, the empty pane too."""
    selected = None
    if viewing:
        try:
            selected = _own(viewing)
        except AppError:
            selected = None
    context = _context(selected)
    body = render_template("playground/_sessions.html", **context)
    headers = {}
    if selected is None:
        body += render_template("playground/_pane.html", oob=True, **context)
        headers["HX-Replace-Url"] = url_for("web.playground")
    return notice(body, message, category), status, headers


@bp.get("/playground/<uuid:session_id>/binding")
@guard(Role.viewer)
def playground_binding(session_id):
    """The header's facts and the session's row, loaded again when a run ends (`run-ended`)."""
    context = _context(_own(session_id))
    return (render_template("playground/_binding.html", **context)
            + render_template("playground/_session_row.html", row=context["current"], oob=True,
                              **context))


# -- running commands ------------------------------------------------------------------------

def _timeout(raw: str) -> int | None:
    if not raw.strip():
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ValidationFailed.one("timeout_sec", "enter a whole number of seconds") from None


@bp.post("/playground/<uuid:session_id>/exec")
@guard(Role.viewer)
def playground_exec(session_id):
    session = _own(session_id)
    command = request.form.get("command", "")
    raw_timeout = request.form.get("timeout_sec", "")
    skill = request.form.get("skill", "").strip()
    status, stored = 200, None
    try:
        # Off the request thread (app.services.sessions.runs): a long command comes back running,
        # and its entry polls for its output until it ends.
        started = runs.start(current_tenant(), principal().user, session, command,
                             _timeout(raw_timeout), skill=skill or None)
        run = Run(command, outcome=started.outcome, skill=skill or None)
        if started.outcome is None and started.run is not None:  # it outlived the wait
            stored = playground_runs.run_view(started.run)
    except AppError as err:
        db.session.rollback()
        run, status = Run(command, error=err, skill=skill or None), err.status
    # The header's "Last run" is this run's when it ended here, else the stored runs' latest.
    last = {"last": run.outcome} if run.outcome else {}
    if not htmx:  # without JavaScript: the page, with this one run in its transcript
        # A stored run is in the history the page shows; a refused one only here.
        return _page(session, status, runs=[run] if run.error else [], command=command,
                     timeout=raw_timeout, skill=skill, **last)
    context = _context(session, **last)
    body = (render_template("playground/_exec_run.html", run=stored) if stored else
            render_template("playground/_run.html", run=run, **context))
    body += render_template("playground/_binding.html", oob=True, **context)
    body += render_template("playground/_session_row.html", row=context["current"], oob=True,
                            **context)
    return body, status
