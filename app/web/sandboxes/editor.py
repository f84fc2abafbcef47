"""The sandbox config editor drawer (reference 10.1): new, edit, create, update, and the
form's live helpers (backend switch, validation, template catalog).

Secrets never reach the browser: the editor is built from `sandbox_doc.masked(row.config)`
with every secret input left empty.
"""

from __future__ import annotations

import uuid
from typing import Any

from flask import current_app, render_template, request, url_for

from app.auth.guards import guard
from app.errors import AppError, NotFound, ValidationFailed
from app.extensions import db, htmx
from app.models import Role, SandboxConfig
from app.security import config_secrets
from app.services.sandboxes import configs as service
from app.services.sandboxes import (
    document as sandbox_doc,
)
from app.services.sandboxes import (
    endpoints,
    explain,
    incidents,
)
from app.services.sandboxes import (
    templates as sandbox_templates,
)
from app.services.sandboxes.configs import Inventory
from app.services.sandboxes.document import BACKENDS
from app.tenancy import current_tenant, get_or_404, principal
from app.web import bp
from app.web.sandboxes.configs import (
    KIND_LABELS,
    UNPICKED,
    force_asked,
    inventory_drawer,
    list_page,
    saved_response,
)
from app.web.sandboxes.form import (
    BLOCK_FIELDS,
    TEMPLATE_FIELD,
    Editor,
)
from app.web.sandboxes.rows import SECRET


def _masked(row: SandboxConfig | None) -> dict[str, Any] | None:
    return sandbox_doc.masked(row.config) if row is not None else None


def endpoint_choices() -> dict[str, Any]:
    """What the operator lets a config reach, as the editor offers it (decisions 11)."""
    return {"engines": [(name, name) for name in sorted(endpoints.engines())],
            "private": endpoints.private_allowed()}


LOST_ALL = ("This config's stored settings can no longer be read (the encryption key "
            "changed). Enter them again and save to repair it.")


def _editor(ed: Editor, row: SandboxConfig | None, status: int = 200, **context):
    return list_page("sandboxes/_editor.html", status, ed=ed, row=row, kinds=_kinds(ed),
                 placed=context.pop("placed", {}), endpoint_choices=endpoint_choices(),
                 **context)


def editing() -> SandboxConfig | None:
    """The stored config an editor helper request is about (`config_id` in the form)."""
    raw = request.form.get("config_id", "")
    if not raw:
        return None
    try:
        config_id = str(uuid.UUID(raw))
    except ValueError:
        raise NotFound("No such sandbox config in this workspace.") from None
    return get_or_404(SandboxConfig, config_id, "sandbox config")


def _kinds(ed: Editor) -> dict[str, str]:
    """The backends the operator allows; a config of one turned off keeps its own, said so."""
    kinds = {k: KIND_LABELS[k] for k in endpoints.backends_allowed()}
    if ed.sandbox_type not in kinds:
        kinds[ed.sandbox_type] = f"{KIND_LABELS[ed.sandbox_type]} (turned off)"
    return kinds


@bp.get("/sandboxes/new")
@guard(Role.admin)
def new_sandbox():
    allowed = endpoints.backends_allowed() or BACKENDS
    kind = request.args.get("backend", allowed[0])
    return _editor(_with_default_image(Editor(sandbox_type=kind if kind in allowed
                                              else allowed[0])), None)


def _with_default_image(ed: Editor) -> Editor:
    """A Docker form without an image starts with the deployment's default image, as a
    value rather than a placeholder that only looks like one."""
    if ed.sandbox_type == "docker" and not ed.values.get("docker.image", "").strip():
        ed.values["docker.image"] = current_app.config["SANDBOX_DEFAULT_IMAGE"]
    return ed


@bp.get("/sandboxes/<uuid:config_id>/edit")
@guard(Role.admin)
def edit_sandbox(config_id):
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    alert = LOST_ALL if config_secrets.lost(row.config) == [config_secrets.WHOLE] else None
    return _editor(Editor.from_doc(_masked(row), row.name, row.description), row, alert=alert,
                   failures=incidents.recent_failures(row))


@bp.post("/sandboxes")
@guard(Role.admin)
def create_sandbox():
    return _save(None)


@bp.post("/sandboxes/<uuid:config_id>/edit")
@guard(Role.admin)
def update_sandbox(config_id):
    return _save(get_or_404(SandboxConfig, str(config_id), "sandbox config"))


def _save(row: SandboxConfig | None):
    ed = Editor.parse(request.form)
    doc = ed.document()
    try:
        if ed.problems:
            raise ValidationFailed([])
        if row is None:
            saved = service.create_config(current_tenant(), principal(), ed.name,
                                          ed.description, doc)
        else:
            saved = service.update_config(current_tenant(), principal(), row, ed.name,
                                          ed.description, doc, force=force_asked())
    except AppError as err:
        db.session.rollback()
        return _not_saved(ed, row, err)
    return saved_response(f"Saved “{saved.name}”." if row else f"Added “{saved.name}”.")


def _not_saved(ed: Editor, row: SandboxConfig | None, err: AppError):
    if row is not None and err.code == "sandboxes_still_live":
        return inventory_drawer(row, Inventory(**err.data), err.message, err.status)
    placed = ed.place(err.errors) if isinstance(err, ValidationFailed) else {}
    context = {"placed": placed, "alert": None if isinstance(err, ValidationFailed)
               else err.message, "offer_force": row is not None and
               err.code == "sandbox_inventory_unverifiable"}
    if htmx:
        # The inputs stay as typed (a typed secret is never sent back): the summary goes
        # above the form and every error slot is refreshed out of band.
        body = render_template("sandboxes/_editor_errors.html", ed=ed, row=row,
                               slots=ed.slots(), **context)
        return body, err.status, {"HX-Retarget": "#editor-alert", "HX-Reswap": "innerHTML"}
    return _editor(ed.for_display(_masked(row)), row, err.status, **context)


@bp.post("/sandboxes/editor/backend")
@guard(Role.admin)
def sandbox_form_backend():
    """The backend select changed: the sections that depend on it, for the new backend."""
    row = editing()
    ed = Editor.parse(request.form)
    fields = BLOCK_FIELDS[ed.sandbox_type]
    carried: list[tuple[str, str]] = []
    for name in list(request.form):  # same-named settings carry over (e2b <-> cube)
        kind, _, key = name.partition(".")
        if kind in BACKENDS and fields.get(key) not in (None, SECRET):
            ed.values.setdefault(f"{ed.sandbox_type}.{key}", request.form[name])
        # What was typed for another backend rides along hidden, so switching back finds
        # it; secrets excepted (they never travel back to the browser).
        if kind in BACKENDS and kind != ed.sandbox_type and \
                BLOCK_FIELDS[kind].get(key) not in (None, SECRET):
            carried.append((name, request.form[name]))
    return render_template("sandboxes/_editor_backend.html",
                           ed=_with_default_image(ed.for_display(_masked(row))), row=row,
                           placed={}, endpoint_choices=endpoint_choices(), carried=carried)


@bp.post("/sandboxes/editor/validate")
@guard(Role.admin)
def sandbox_form_validate():
    """Live check of the network policy: the document the form would save, validated as
    the save validates it (URLs are not resolved), its network errors put in their slots."""
    row = editing()
    ed = Editor.parse(request.form)
    doc = ed.document()
    errors: list[dict[str, str]] = []
    try:
        if row is not None:
            doc = sandbox_doc.merge(doc, row.config)
        sandbox_doc.validate(doc, resolve_urls=False)
    except ValidationFailed as err:
        errors = err.errors
    placed = {slot: messages for slot, messages in ed.place(errors).items()
              if slot.startswith("network")}
    slots = [slot for slot in ed.slots() if slot.startswith("network")]
    return render_template("sandboxes/_live_errors.html", placed=placed, slots=slots)


@bp.post("/sandboxes/editor/templates")
@guard(Role.admin)
def sandbox_form_templates():
    """The template catalog (local images for Docker) of the form's unsaved connection."""
    row = editing()
    ed = Editor.parse(request.form)
    doc = ed.document()
    kind = ed.sandbox_type
    current = doc[kind].get(TEMPLATE_FIELD[kind], "")
    doc[kind][TEMPLATE_FIELD[kind]] = current or UNPICKED
    templates, error = [], None
    try:
        if ed.problems:
            raise ValidationFailed(ed.problems)
        who = principal()
        with incidents.worded(doc):
            templates = sandbox_templates.query(who.tenant_id, who.actor_id, row, doc, {},
                                                may_reuse=service.may_update(who))[0]["templates"]
    except ValidationFailed as err:
        error = "Fix the connection settings first: " + " ".join(
            e["message"] for e in err.errors)
    except incidents.ProviderFailed as err:
        error = f"The catalog could not be read: {err.sentence}"
    except AppError as err:
        error = err.message
    db.session.rollback()
    context = {"templates": templates, "error": error, "current": current, "kind": kind,
               "field": f"{kind}.{TEMPLATE_FIELD[kind]}"}
    if not htmx:  # a form post without JavaScript (issue 27 item 8): a page of its own
        back = url_for("web.edit_sandbox", config_id=row.id) if row else \
            url_for("web.new_sandbox")
        return render_template("sandboxes/catalog.html", row=row, back=back, page=True,
                               **context)
    return render_template("sandboxes/_templates.html", **context)


@bp.post("/sandboxes/editor/explain")
@guard(Role.admin)
def sandbox_form_explain():
    """"Would this be allowed?": the verdict for the host typed, under the policy the form
    holds now (saved or not), as `POST /sandbox-configs/network/explain` answers it."""
    host = request.form.get("explain_host", "").strip()
    if not host:
        return render_template("sandboxes/_explain.html", answer=None, error=None)
    ed = Editor.parse(request.form)
    answer, error = None, None
    try:
        if ed.problems:
            raise ValidationFailed(ed.problems)
        answer = explain.explain_unsaved(ed.document(), host)
    except ValidationFailed as err:
        own = [e["message"] for e in err.errors if e["field"] == "host"]
        error = own[0] if own else "Fix the network policy first: it has problems to fix " \
                                   "before saving."
    return render_template("sandboxes/_explain.html", answer=answer, error=error)
