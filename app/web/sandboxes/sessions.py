"""The sessions on a sandbox config, in its inventory drawer, for admins (issue 11 item 6):
who holds them, an End button for each and "End these sessions" for all (a config with
live sandboxes cannot be deleted, forced or not). Ending closes the record now; a job
removes the sandbox."""

from __future__ import annotations

from typing import Any

from flask import flash, redirect, render_template, url_for

from app.auth.guards import guard
from app.extensions import htmx
from app.models import Role, SandboxConfig, SandboxSession
from app.services.sandboxes import configs
from app.services.sessions import ending, workspace
from app.tenancy import current_tenant, get_or_404, principal
from app.web import bp
from app.web._helpers import notice


def sessions_context(row: SandboxConfig) -> dict[str, Any]:
    """What the drawer's sessions section shows for `row`."""
    tenant = current_tenant()
    return {"config_sessions": workspace.list_workspace_sessions(tenant, row.id),
            "pending_removals": len(ending.pending_for(tenant, row.id))}


@bp.post("/sandboxes/sessions/<uuid:session_id>/end")
@guard(Role.admin)
def end_config_session(session_id):
    session = get_or_404(SandboxSession, str(session_id), "session")
    row = get_or_404(SandboxConfig, session.sandbox_config_id, "sandbox config")
    owner = session.user_id
    ending.end_session(current_tenant(), principal(), session, "ended by admin")
    message = ("Session ended; its sandbox is being removed." if owner == principal().actor_id
               else "Member's session ended; its sandbox is being removed.")
    if not htmx:
        flash(message, "success")
        return redirect(url_for("web.sandbox_inventory", config_id=row.id))
    body = render_template("sandboxes/_sessions.html", row=row, **sessions_context(row))
    return notice(body, message)


@bp.post("/sandboxes/<uuid:config_id>/sessions/end")
@guard(Role.admin)
def end_all_config_sessions(config_id):
    """Every member's session on the config, and the session sandboxes the provider still
    lists whose record is gone."""
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    inventory = configs.take_inventory(row)
    count = ending.end_config_sessions(current_tenant(), principal(), row,
                                       inventory.session_ids)
    message = (f"{count} session{'s' if count != 1 else ''} ended; their sandboxes are being "
               "removed." if count else "No session was holding a sandbox.")
    if not htmx:
        flash(message, "success")
        return redirect(url_for("web.sandbox_inventory", config_id=row.id))
    body = render_template("sandboxes/_sessions.html", row=row, **sessions_context(row))
    return notice(body, message)
