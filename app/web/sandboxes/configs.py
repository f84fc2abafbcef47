"""Sandboxes: the workspace's sandbox configs (reference 10.1), the script kill switch, the
editor drawer with live network-policy validation, the inventory view and delete.

Secrets never reach the browser: cards read only non-secret fields, and the editor is
built from `sandbox_doc.masked(row.config)` with every secret input left empty.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import current_app, flash, redirect, render_template, request, url_for

from app.auth.guards import guard
from app.errors import AppError, BadRequest
from app.extensions import db, htmx
from app.models import Role, SandboxConfig
from app.security import config_secrets, cursors
from app.services import config_removal, dashboard, paging
from app.services.sandboxes import configs as service
from app.services.sandboxes import (
    document as sandbox_doc,
)
from app.services.sandboxes import (
    endpoints,
    lists,
    network_policy,
)
from app.services.sandboxes.configs import Inventory
from app.services.sandboxes.document import BACKENDS
from app.tenancy import current_tenant, get_or_404, principal
from app.web import bp
from app.web._helpers import confirm_page, notice
from app.web.sandboxes import sessions
from app.web.sandboxes.form import (
    TTL_FIELD,
)

KIND_LABELS = endpoints.BACKEND_LABELS
# A config's last sandbox check, as its card and the dashboard show it.
OUTCOME_LABELS = {
    "passed": ("Check passed", "badge-ok"),
    "problems": ("Check found problems", "badge-danger"),
    "checking": ("Checking now", "badge-info"),
    "unfinished": ("Check did not finish", "badge-warn"),
    "never": ("Never checked", "badge-muted"),
}
PAGE_SIZE, FILTER_MAX = 50, 100  # cards per page (issue 15 item 7); filter text length
# Reading the catalog is how an admin picks the template, so an empty template field
# must not fail the document's required-field check for that one call.
UNPICKED = "unpicked-template"


@bp.app_template_filter("slot_id")
def slot_id(path: str) -> str:
    return "err-" + re.sub(r"[^A-Za-z0-9_]+", "-", path).strip("-")


@bp.app_template_filter("input_id")
def input_id(path: str) -> str:
    return "f-" + re.sub(r"[^A-Za-z0-9_]+", "-", path).strip("-")


@bp.app_template_filter("next_index")
def next_index(rows: list) -> int:
    return max((row.index for row in rows), default=-1) + 1


# -- the list ------------------------------------------------------------------------------

def duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def network_summary(doc: dict[str, Any]) -> str:
    """One line for a card: "Egress open", "Default deny · 3 allowed", "2 denied"."""
    network = doc.get("network") or {}
    if doc["sandbox_type"] == "docker" and (doc.get("docker") or {}).get("network_mode") == "none":
        return "No network"
    allowed, denied = len(network.get("allow_out") or []), len(network.get("deny_out") or [])
    if network_policy.denies_by_default(network):
        text = f"Default deny · {allowed} allowed" if allowed else "Default deny"
    else:
        text = f"{denied} denied" if denied else "Egress open"
    rules = len(network.get("cube_rules") or []) + len(network.get("e2b_host_rules") or [])
    if rules:
        text += f" · {rules} rule{'s' if rules > 1 else ''}"
    return text


def card(row: SandboxConfig) -> dict[str, Any]:
    """What a card shows: never a secret (only the fields named here are read)."""
    doc, kind = row.config, row.sandbox_type
    block, lost = doc.get(kind) or {}, config_secrets.lost(doc)
    ttl = block.get(TTL_FIELD[kind]) or sandbox_doc.DEFAULT_TTL[kind]
    if kind == "docker":
        target = block.get("image", "")
        facts = [("Engine", endpoints.engine_of(block))]
    else:
        url = block.get("api_url", "")
        target = urlsplit(url).netloc or url or ("E2B cloud" if kind == "e2b" else "—")
        facts = [("Template", sandbox_doc.template_of(doc) or "—")]
    facts += [("TTL", duration(int(ttl))), ("Network", network_summary(doc))]
    return {"id": row.id, "name": row.name, "description": row.description, "kind": kind,
            "kind_label": KIND_LABELS[kind], "target": target, "facts": facts,
            "desktop": bool(doc.get("desktop_enabled")),
            "lost": len(lost), "lost_all": lost == [config_secrets.WHOLE]}


def _tab() -> str:
    """The backend tab: from the query string, or (after an htmx mutation) the page's."""
    tab = request.args.get("backend", "")
    if htmx and request.method == "POST" and htmx.current_url:
        tab = parse_qs(urlsplit(htmx.current_url).query).get("backend", [""])[0]
    return tab if tab in BACKENDS else ""


def _filter() -> str:
    """The filter box's text: from the query string, or (after an htmx mutation) the page's."""
    text = request.args.get("q", "")
    if htmx and request.method == "POST" and htmx.current_url:
        text = parse_qs(urlsplit(htmx.current_url).query).get("q", [""])[0]
    return " ".join(text.split())[:FILTER_MAX]


def _list_context() -> dict[str, Any]:
    """One page of cards (PAGE_SIZE, by name) of the chosen backend matching the filter,
    with its place in the list ("51-100 of 120"); the next and previous pages are signed
    cursors (the last or first card's keys) bound to this workspace, tab and filter."""
    tenant, tab, text = current_tenant(), _tab(), _filter()
    counts = lists.count_by_backend(tenant, text)
    tabs = [("", "All", sum(counts.values()))] + [(k, KIND_LABELS[k], counts.get(k, 0))
                                                  for k in BACKENDS]
    scope = json.dumps(["web.sandboxes", tenant.id, tab, text])
    get = request.method == "GET"
    before = _cursor(scope, "before") if get else None
    after = None if before or not get else _cursor(scope, "after")
    which = {"by_name": True, "name_contains": text, "sandbox_type": tab or None}
    page = lists.configs_page(tenant, paging.Window(PAGE_SIZE, before or after),
                                      count=False, backwards=before is not None, **which)
    if before and not page.rows:  # nothing before it any more: the first page
        page = lists.configs_page(tenant, paging.Window(PAGE_SIZE), count=False,
                                          **which)
    total = counts.get(tab, 0) if tab else sum(counts.values())
    start = lists.position(tenant, page.rows[0], **which) \
        if page.rows and (before or after) else 0
    here = {"backend": tab or None, "q": text or None}

    def link(direction: str, row) -> str:
        return url_for("web.sandboxes", **here, **{direction: cursors.seal(
            current_app.secret_key, scope, (row.name, row.id))})
    more = page.more if not before else start + len(page.rows) < total
    return {"tenant": tenant, "tab": tab, "tabs": tabs, "total": sum(counts.values()),
            "kind_labels": KIND_LABELS, "q": text, "page_size": PAGE_SIZE,
            "matching": total, "first_shown": start + 1, "last_shown": start + len(page.rows),
            "next_url": link("after", page.rows[-1]) if more and page.rows else None,
            "prev_url": link("before", page.rows[0]) if start > 0 else None,
            "first_url": url_for("web.sandboxes", **here) if start > 0 else None,
            "cards": [card(r) for r in page.rows], "outcome_labels": OUTCOME_LABELS,
            "checks": dashboard.last_checks(tenant, [r.id for r in page.rows])}


def _cursor(scope: str, name: str) -> tuple | None:
    """The page's `after` or `before` cursor; one from another tab, filter or workspace
    starts over."""
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        return cursors.open_(current_app.secret_key, scope, raw)
    except cursors.BadCursor:
        return None


def list_page(drawer: str, status: int = 200, headers: dict | None = None, **context):
    """A drawer: the fragment for htmx, else the list page with the drawer open."""
    if htmx:
        return render_template(drawer, **context), status, headers or {}
    return render_template("sandboxes/index.html", drawer=drawer,
                           **{**_list_context(), **context}), status


@bp.get("/sandboxes")
@guard(Role.viewer)
def sandboxes():
    template = "sandboxes/_list.html" if htmx else "sandboxes/index.html"
    return render_template(template, drawer=None, **_list_context())


@bp.post("/sandboxes/scripts")
@guard(Role.admin)
def set_sandbox_scripts():
    choice = request.form.get("scripts")
    if choice not in ("on", "off"):
        raise BadRequest("Choose whether scripts are on or off.")
    tenant = current_tenant()
    service.set_scripts_disabled(tenant, principal(), choice == "off")
    message = ("Scripts are disabled: no agent in this workspace may run scripts."
               if tenant.scripts_disabled else "Scripts are enabled again.")
    return _mutated(message, "sandboxes/_kill_switch.html", tenant=tenant)


def _mutated(message: str, fragment: str, **context):
    if htmx:
        return notice(render_template(fragment, **context), message)
    flash(message, "success")
    return redirect(url_for("web.sandboxes"))


def saved_response(message: str):
    """After a save or delete: the fresh list, the drawer closed, a notice."""
    if not htmx:
        flash(message, "success")
        return redirect(url_for("web.sandboxes"))
    context = _list_context()
    body = render_template("sandboxes/_list.html", **context)
    body += '<div id="drawer-slot" hx-swap-oob="true"></div>'
    return notice(body, message), 200, {
        "HX-Retarget": "#sandbox-list", "HX-Reswap": "outerHTML",
        "HX-Replace-Url": url_for("web.sandboxes", backend=context["tab"] or None)}


def force_asked() -> bool:
    return "1" in (request.args.get("force"), request.form.get("force"))


# -- inventory and delete --------------------------------------------------------------------

def inventory_drawer(row: SandboxConfig, inventory: Inventory, message: str | None = None,
               status: int = 200):
    """The inventory drawer; after a refused save or delete it replaces what was open."""
    headers = {"HX-Retarget": "#drawer-slot", "HX-Reswap": "innerHTML"} if status >= 400 else {}
    return list_page("sandboxes/_inventory.html", status, headers, row=row, inventory=inventory,
                 message=message, kind_labels=KIND_LABELS,
                 **sessions.sessions_context(row))


@bp.get("/sandboxes/<uuid:config_id>/inventory")
@guard(Role.admin)
def sandbox_inventory(config_id):
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    return inventory_drawer(row, service.take_inventory(row))


@bp.get("/sandboxes/<uuid:config_id>/delete")
@guard(Role.admin)
def confirm_delete_sandbox(config_id):
    """Without JavaScript a Delete (or Force delete) button lands here and asks first."""
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    action = url_for("web.delete_sandbox", config_id=row.id, force="1" if force_asked() else None)
    if force_asked():
        return confirm_page(f"Force delete “{row.name}”?", "Force delete", action,
                            url_for("web.sandbox_inventory", config_id=row.id),
                            "Its provider cannot be listed now. Members' sessions on it end; "
                            "their sandboxes are removed once the provider answers.")
    return confirm_page(f"Delete “{row.name}”?", "Delete", action, url_for("web.sandboxes"),
                        "Sandlot first checks that no sandbox created from it is still live.")


@bp.post("/sandboxes/<uuid:config_id>/delete")
@guard(Role.admin)
def delete_sandbox(config_id):
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    name = row.name
    try:
        config_removal.delete_config(current_tenant(), principal(), row, force=force_asked())
    except AppError as err:
        db.session.rollback()
        if err.code == "sandboxes_still_live":
            return inventory_drawer(row, Inventory(**err.data), err.message, err.status)
        if err.code == "sandbox_inventory_unverifiable":
            return inventory_drawer(row, Inventory(unverifiable=True), err.message, err.status)
        raise
    return saved_response(f"Deleted “{name}”.")
