"""The sessions on a sandbox config, in its inventory drawer, for admins (issue 11 item 6):
who holds them and an End button. Ending closes the record now; a job removes the sandbox."""

from __future__ import annotations

from typing import Any

from flask import flash, redirect, render_template, url_for

from app.auth.guards import guard
from app.extensions import htmx
from app.models import Role, SandboxConfig, SandboxSession
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
