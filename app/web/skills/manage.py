"""The Manage drawer of one installation (reference 10.2), and the one poller that keeps
every live status of the Skills page current (issue 27 item 1).

While any installation the page shows is in flight, the skill list carries one poller
(skills/_status.html `watcher`) that asks `installs_live` about all of them once a
second. One answer, read once, swaps every copy of each status (the card's chip, the
result panel's row, the drawer's header) out of band, the open Manage drawer's progress
and transcript with them; once a run has its verdict it re-renders the list and the open
drawer whole, and the list it sends has no poller when nothing is left in flight. So the
panels never disagree, and no page polls forever.

The drawer comes with the list behind it, read at the same moment; every action answers
with the updated drawer, that list (its chip shows the change: disabled, reinstalling)
and a visible message. The drawer and its actions are Admin-only, like the API they
mirror (viewers get 403 and see no links).
"""

from __future__ import annotations

import uuid
from typing import Any

from flask import render_template, request
from sqlalchemy import select

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
from app.web.skills.catalog import _list_context
from app.web.skills.status import BUSY, readable, row_status

BASE = "/skills/installs/<uuid:skill_id>"
WATCH_MAX = 200  # installations one poll answers for


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


def _context(row: InstalledSkill, confirm: bool = False) -> dict[str, Any]:
    config = db.session.get(SandboxConfig, row.sandbox_config_id)
    notes, events = stream.reinstall_notes(stream.transcript_of(row.tenant_id, row))
    holders = personal_values.members_with_values(row.id) if confirm else 0
    live = stream.current(row.tenant_id, row)
    return {"row": row, "view": service.view(row), "config": config, "holders": holders,
            "live": live, "status": row_status(row, config, live), "notes": notes,
            "events": readable(events),
            "confirm": confirm, "notes_max": service.NOTES_MAX}


def _drawer_html(row: InstalledSkill | None, confirm: bool = False) -> str:
    if row is None:
        return render_template("skills/_manage_gone.html")
    return render_template("skills/_manage.html", **_context(row, confirm))


def _drawer(row: InstalledSkill | None, message: str = "", category: str = "success",
            confirm: bool = False, status: int = 200):
    template = "skills/_manage_gone.html" if row is None else "skills/_manage.html"
    if not htmx:  # opened directly: the Skills page with the drawer open
        context = {} if row is None else _context(row, confirm)
        return render_template("skills/index.html", drawer=template,
                               **{**_list_context(), **context}), status
    # The list behind comes with it, read at the same moment: its chip says what the drawer
    # says (and, after an action, what it changed).
    follow = row is not None and str(row.status) in BUSY
    body = _drawer_html(row, confirm) + render_template("skills/_list.html", oob=True,
                                                        **_list_context(follow))
    return (notice(body, message, category) if message else body), status


@bp.get("/skills/installs/live")
@guard(Role.viewer)
def installs_live():
    """The poll of the page's installations in flight (`watch`), and of the open Manage
    drawer's (`open`, admins only): see the module's docstring."""
    ids = [i for i in request.args.getlist("watch")[:WATCH_MAX] if _is_uuid(i)]
    opened = request.args.get("open", "")
    opened = opened if _is_uuid(opened) and principal().role.at_least(Role.admin) else None
    followed = [*ids, opened] if opened else ids
    rows = {row.id: row for row in db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.tenant_id == current_tenant().id, InstalledSkill.id.in_(followed),
        InstalledSkill.deleted_at.is_(None)))}

    def busy(skill_id: str) -> bool:
        return skill_id in rows and str(rows[skill_id].status) in BUSY

    body = ""
    # A verdict (or nothing left to follow) re-renders the list: its chips, and a poller
    # only while something is still in flight.
    if not followed or not all(busy(i) for i in followed):
        body = render_template("skills/_list.html", oob=True,
                               **_list_context(follow=bool(opened and busy(opened))))
    configs: dict[str, SandboxConfig | None] = {}
    for skill_id in ids:
        if skill_id in rows and skill_id != opened:  # the drawer's render carries its own
            row = rows[skill_id]
            config = configs.setdefault(row.sandbox_config_id,
                                        db.session.get(SandboxConfig, row.sandbox_config_id))
            body += render_template("skills/_status_oob.html", s=row_status(row, config))
    if opened:
        body += _opened(rows.get(opened))
    return body


def _opened(row: InstalledSkill | None) -> str:
    """The open drawer: its live part while in flight; once the run has its verdict the
    drawer whole, since its actions and declared variables depend on how the run ended."""
    if row is not None and str(row.status) in BUSY:
        context = _context(row)
        return (render_template("skills/_manage_live.html", oob=True, **context)
                + render_template("skills/_status_oob.html", s=context["status"]))
    return render_template("skills/_drawer_oob.html", body=_drawer_html(row))


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


@bp.get(BASE)
@guard(Role.admin)
def manage_install(skill_id):
    return _drawer(_row(skill_id), confirm=request.args.get("confirm") == "uninstall")


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
