"""The sandbox editor's template provisioning (reference 3.1.7 and 10.1): "Ensure" builds
the standard or desktop template when the catalog lacks it, "Rebuild" builds a fresh one
and switches every config of the same identity to it. Both start (or join) a
`provision_templates` job and answer a fragment that polls it until it ends (status 286
stops the polling). The Sandboxes card loads its template's status the same way.
"""

from __future__ import annotations

import copy

from flask import render_template, request

from app.auth.guards import guard
from app.errors import AppError, BadRequest, NotFound, ValidationFailed
from app.extensions import db
from app.models import Job, Role, SandboxConfig
from app.security import config_secrets
from app.services.sandboxes import configs as sandbox_configs
from app.services.sandboxes import image as skill_image
from app.services.sandboxes import templates as sandbox_templates
from app.tenancy import get_or_404, principal
from app.web import bp
from app.web.jobs import STOP_POLLING
from app.web.sandboxes.editor import editing
from app.web.sandboxes.form import Editor

# The card's status read is a courtesy: never hold the request for a provider's full timeout.
STATUS_TIMEOUT_SEC = 5


@bp.post("/sandboxes/editor/templates/build")
@guard(Role.admin)
def build_sandbox_template():
    """Ensure or rebuild the form's standard/desktop template; answers the job fragment."""
    row = editing()
    role = request.form.get("template_role", "")
    action = request.form.get("template_action", "")
    if role not in sandbox_templates.ROLES or action not in ("ensure", "rebuild"):
        raise BadRequest("Choose ensure or rebuild, for the standard or desktop template.")
    ed = Editor.parse(request.form)
    option = f"{'replace' if action == 'rebuild' else 'ensure'}_{role}"
    context = {"role": role, "action": action, "job": None, "data": None, "problems": [],
               "error": None}
    status = 200
    try:
        if ed.problems:
            raise ValidationFailed(ed.problems)
        who = principal()
        data, job = sandbox_templates.query(
            who.tenant_id, who.actor_id, row, ed.document(), {option: True},
            may_reuse=sandbox_configs.may_update(who))
        context.update(data=data, job=job)
        status = 202 if job is not None else 200
    except ValidationFailed as err:
        context["problems"], status = err.errors, 400
    except AppError as err:  # 409 skill_snapshot_blocks_template, 503 catalog unreachable
        context["error"], status = err.message, err.status
    db.session.rollback()
    context["field"] = f"{ed.sandbox_type}.template_id"
    return render_template("sandboxes/_template_build.html", **context), status


@bp.get("/sandboxes/template-builds/<uuid:build_id>")
@guard(Role.admin)
def sandbox_template_build(build_id):
    job = get_or_404(Job, str(build_id), "template build")
    if job.kind != sandbox_templates.JOB_KIND:
        raise NotFound("No such template build in this workspace.")
    work = (job.params or {}).get("work") or [{}]
    context = {"job": job, "data": job.result, "problems": [], "error": None,
               "role": work[0].get("role", "standard"),
               "action": "rebuild" if work[0].get("replace") else "ensure",
               "field": request.args.get("field", "")}
    return (render_template("sandboxes/_template_build.html", **context),
            STOP_POLLING if job.is_terminal else 200)


@bp.get("/sandboxes/<uuid:config_id>/template-status")
@guard(Role.viewer)
def sandbox_template_status(config_id):
    """The card's template badge: a build in flight for its identity, or the catalog's
    word on its template (read with a short timeout)."""
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    doc = copy.deepcopy(row.config)
    kind = doc.get("sandbox_type")
    if kind not in ("e2b", "cube"):
        raise NotFound("Only E2B and Cube configs have a template catalog.")
    who = principal()
    job = sandbox_templates.in_flight(who.tenant_id, skill_image.fingerprint(doc))
    template_id = sandbox_templates.role_id(doc, [], "desktop" if doc.get(
        "desktop_enabled") else "standard") or (doc.get(kind) or {}).get("template_id", "")
    found, status = None, "unknown"
    if job is None and template_id and not config_secrets.lost(doc):
        found, status = sandbox_templates.status_at_provider(doc, template_id, STATUS_TIMEOUT_SEC)
    db.session.rollback()
    context = {"row": row, "job": job, "status": "building" if job else status,
               "found": found, "template_id": template_id}
    return render_template("sandboxes/_template_status.html", **context)
