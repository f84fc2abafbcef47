"""The sandbox editor's "Test connection" and "Deep check" (reference 5 and 10.1,
decisions 6): the form as it stands (unsaved values, plus config_id when editing) is
checked by a `sandbox_check` job, and a fragment polls the job, showing each check as it
completes, until the job ends (status 286 stops the polling).
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.auth.guards import guard
from app.errors import NotFound, ValidationFailed
from app.extensions import db, htmx
from app.models import Job, Role, SandboxConfig
from app.services.sandboxes import configs
from app.services.sandboxes.check import job as sandbox_check
from app.services.sandboxes.check.parts import RESTRICTED
from app.tenancy import get_or_404, principal
from app.web import bp
from app.web.jobs import STOP_POLLING
from app.web.sandboxes.editor import editing
from app.web.sandboxes.form import Editor

LABELS = {
    "client_build": "Client set-up",
    "api_url_reachable": "Control plane reachable",
    "credential_valid": "Credentials accepted",
    "template_exists": "Template available",
    "sandbox_exec": "Sandbox runs a command",
    "egress_available": "Outbound internet",
    "egress_denied_enforced": "Denied traffic blocked",
}
# A Docker engine takes no API key: its list call proves access, not credentials.
DOCKER_LABELS = {**LABELS, "credential_valid": "Engine access"}

# Why a row was skipped, as a sentence (the reason codes stay in the API and the job log).
REASONS = {
    "needs_deep_check": "Runs in the deep check only",
    "control_plane_unreachable": "Not tried: the control plane could not be reached",
    "sandbox_not_created": "Not tried: no sandbox could be created",
    "sandbox_exec_failed": "Not tried: the sandbox could not run a command",
    "egress_restricted_by_policy": "Blocked by the network policy",
    "credentials_rejected": "Not tried: the credentials were refused",
    "template_not_set": "Not tried: no template is set",
    "not_supported": "This backend does not support it",
    "no_denied_target": "Not tried: the policy denies nothing that could be tested",
    "check_budget_exhausted": "Not tried: the check ran out of time",
}


@bp.post("/sandboxes/check")
@guard(Role.admin)
def start_sandbox_check():
    """Check the editor's current values; answers the polling result fragment."""
    row = editing()
    deep = request.form.get("deep") == "1"
    ed = Editor.parse(request.form)
    doc = ed.document()
    try:
        if ed.problems:
            raise ValidationFailed(ed.problems)
        who = principal()
        job = sandbox_check.start(who.tenant_id, who.actor_id, row, doc, deep,
                                  may_reuse=configs.may_update(who))
    except ValidationFailed as err:
        db.session.rollback()
        return _render(None, 400, deep=deep, problems=err.errors)
    if not htmx:  # a form post without JavaScript: the check's page, which reloads itself
        return redirect(url_for("web.sandbox_check_result", check_id=job.id), 303)
    return _render(job, 202)


@bp.get("/sandboxes/checks/<uuid:check_id>")
@guard(Role.admin)
def sandbox_check_result(check_id):
    job = get_or_404(Job, str(check_id), "sandbox check")
    if job.kind != sandbox_check.JOB_KIND:
        raise NotFound("No such sandbox check in this workspace.")
    return _render(job, STOP_POLLING if job.is_terminal else 200)


def _render(job: Job | None, status: int, deep: bool | None = None,
            problems: list[dict[str, str]] | None = None):
    rows = [{**row, "state": state(row)} for row in sandbox_check.rows_of(job)] \
        if job is not None else []
    context = {
        "job": job, "problems": problems or [], "labels": _labels(job), "reasons": REASONS,
        "deep": bool(job.params.get("deep")) if job is not None else deep, "rows": rows,
        "warnings": sum(row["state"] == "warn" for row in rows),
    }
    page = "sandboxes/_check.html" if htmx else "sandboxes/check.html"
    context["config"] = _checked_config(job)
    context["back"] = url_for("web.edit_sandbox", config_id=context["config"].id) \
        if context["config"] is not None else url_for("web.sandboxes")
    if not htmx and status == STOP_POLLING:
        status = 200  # a browser without htmx reads the page, not a polling signal
    return render_template(page, **context), status


def _labels(job: Job | None) -> dict[str, str]:
    params, result = (job.params or {}, job.result or {}) if job is not None else ({}, {})
    provider = params.get("provider") or result.get("provider")
    return DOCKER_LABELS if provider == "docker" else LABELS


def state(row: dict) -> str:
    """ok, warn (passed, but an allowed destination did not answer), failed, blocked (by
    the config's own policy: tried, not skipped) or skipped."""
    if row["ok"] is None:
        return "blocked" if row["reason"] == RESTRICTED else "skipped"
    if row["ok"] is False:
        return "failed"
    unreachable = [t for t in row.get("targets") or () if t["listed"] and not t["reachable"]]
    return "warn" if unreachable else "ok"


def _checked_config(job: Job | None) -> SandboxConfig | None:
    """The stored config a check is about (the page's way back to its editor), if any."""
    config_id = (job.params or {}).get("config_id") if job is not None else \
        request.form.get("config_id")
    row = db.session.get(SandboxConfig, config_id) if config_id else None
    live = row is not None and row.deleted_at is None
    return row if live and row.tenant_id == principal().tenant_id else None
