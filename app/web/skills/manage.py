"""The Manage drawer of one installation (reference 10.2) and the live chip of the Skills
page. Progress and the transcript are read from the durable install events and re-read by
htmx every second while the run is in flight; a fragment whose run has a verdict answers
286, which tells htmx to stop polling, so no page polls forever.

Every action answers with the updated drawer and a visible message. The drawer and its
actions are Admin-only, like the API they mirror (viewers get 403 and see no links).
"""

from __future__ import annotations

from typing import Any

from flask import render_template, request

from app.auth.guards import guard
from app.errors import AppError, BadRequest, NotFound
from app.extensions import db, htmx
from app.models import InstalledSkill, Role, SandboxConfig
from app.services.personal import values as personal_values
from app.services.skills import installed as service
from app.services.skills.installs import stream
from app.tenancy import current_tenant, principal
from app.web import bp
from app.web._helpers import notice
from app.web.sandboxes.configs import KIND_LABELS

STOP_POLLING = 286  # htmx: swap this answer, then stop the `every` trigger
LABELS = {"installing": "Installing", "ready": "Ready", "failed": "Failed",
          "removing": "Removing"}
BASE = "/skills/installs/<uuid:skill_id>"


def _row(skill_id, allow_gone: bool = False) -> InstalledSkill | None:
    """The workspace's installation; a finished uninstall is None with `allow_gone`."""
    row = db.session.get(InstalledSkill, str(skill_id))
    if row is None or row.tenant_id != current_tenant().id:
        raise NotFound("No such skill in this workspace.")
    if row.deleted_at is not None:
        if allow_gone:
            return None
        raise NotFound("No such skill in this workspace.")
    return row


def chip_view(row: InstalledSkill, config: SandboxConfig | None = None) -> dict[str, Any]:
    """What one chip shows: the install summary plus its live percent and stage."""
    config = config or db.session.get(SandboxConfig, row.sandbox_config_id)
    view = {"skill_id": row.id, "sandbox_config_name": config.name if config else "",
            "sandbox_type": config.sandbox_type if config else "", "status": str(row.status),
            "enabled": row.enabled, "error": row.error, "version": row.version,
            "served": {"version": row.served.get("version", "")} if row.served else None}
    if row.status in stream.IN_FLIGHT:
        view["progress"] = stream.current(row.tenant_id, row)
    return view


def _context(row: InstalledSkill, confirm: bool = False) -> dict[str, Any]:
    config = db.session.get(SandboxConfig, row.sandbox_config_id)
    notes, events = stream.reinstall_notes(stream.transcript_of(row.tenant_id, row))
    holders = personal_values.members_with_values(row.id) if confirm else 0
    return {"row": row, "view": service.view(row), "config": config, "holders": holders,
            "live": stream.current(row.tenant_id, row), "notes": notes,
            "events": events, "labels": LABELS,
            "kinds": KIND_LABELS, "confirm": confirm, "notes_max": service.NOTES_MAX}


def _drawer(row: InstalledSkill | None, message: str = "", category: str = "success",
            confirm: bool = False, status: int = 200):
    template = "skills/_manage_gone.html" if row is None else "skills/_manage.html"
    context = {} if row is None else _context(row, confirm)
    if not htmx:  # opened directly: the Skills page with the drawer open
        from app.web.skills.catalog import _list_context
        return render_template("skills/index.html", drawer=template,
                               **{**_list_context(), **context}), status
    body = render_template(template, **context)
    return (notice(body, message, category) if message else body), status


@bp.get(f"{BASE}/chip")
@guard(Role.viewer)
def install_chip(skill_id):
    row = _row(skill_id, allow_gone=True)
    if row is None:
        return "", STOP_POLLING
    body = render_template("skills/_chip_one.html", i=chip_view(row), labels=LABELS,
                           kinds=KIND_LABELS)
    return body, 200 if row.status in stream.IN_FLIGHT else STOP_POLLING


@bp.get(BASE)
@guard(Role.admin)
def manage_install(skill_id):
    return _drawer(_row(skill_id), confirm=request.args.get("confirm") == "uninstall")


@bp.get(f"{BASE}/live")
@guard(Role.admin)
def manage_install_live(skill_id):
    row = _row(skill_id, allow_gone=True)
    if row is None:  # removed: the whole drawer says so (nothing of the skill is left)
        return render_template("skills/_manage_gone.html"), STOP_POLLING, {
            "HX-Retarget": "#drawer-slot", "HX-Reswap": "innerHTML"}
    if row.status in stream.IN_FLIGHT:
        return render_template("skills/_manage_live.html", **_context(row))
    # The verdict: the whole drawer again, since its actions and the declared variables
    # depend on how the run ended.
    return render_template("skills/_manage.html", **_context(row)), STOP_POLLING, {
        "HX-Retarget": "#drawer-slot", "HX-Reswap": "innerHTML"}


def _act(skill_id, action, message: str):
    """Run one action; a refusal is shown in the drawer as an error message."""
    row = _row(skill_id)
    try:
        message = action(row) or message
    except AppError as err:
        db.session.rollback()
        row = _row(skill_id, allow_gone=True)
        return _drawer(row, err.message, "error", status=200 if htmx else err.status)
    db.session.expire_all()
    return _drawer(_row(skill_id, allow_gone=True), message)


@bp.post(f"{BASE}/stop")
@guard(Role.admin)
def manage_install_stop(skill_id):
    return _act(skill_id, lambda row: service.stop(current_tenant(), principal(), row) and None,
                "Install stopped.")


@bp.post(f"{BASE}/reinstall")
@guard(Role.admin)
def manage_install_reinstall(skill_id):
    notes = (request.form.get("notes") or "").strip()[:service.NOTES_MAX] or None
    return _act(skill_id, lambda row: service.reinstall(current_tenant(), principal(), row,
                                                        notes) and None,
                "Reinstall started" + (" with your notes." if notes else "."))


@bp.post(f"{BASE}/enabled")
@guard(Role.admin)
def manage_install_enabled(skill_id):
    enabled = request.form.get("enabled") == "true"

    def toggle(row):
        service.update(current_tenant(), principal(), row, enabled, None)
        return f"“{row.name}” is {'enabled' if enabled else 'disabled'}."

    return _act(skill_id, toggle, "")


@bp.post(f"{BASE}/env")
@guard(Role.admin)
def manage_install_env(skill_id):
    name = (request.form.get("name") or "").strip()[:128]
    clear = request.form.get("clear") == "1"
    value = "" if clear else request.form.get("value") or ""

    def save(row):
        if not clear and not value:
            raise BadRequest(f"Enter a value for {name}, or use Clear.")
        service.update(current_tenant(), principal(), row, None, {name: value})
        return f"{name} {'cleared' if clear else 'saved'}."

    return _act(skill_id, save, "")


@bp.post(f"{BASE}/uninstall")
@guard(Role.admin)
def manage_install_uninstall(skill_id):
    return _act(skill_id, lambda row: service.uninstall(current_tenant(), principal(), row)
                and None, "Uninstall started.")
