"""The home page: the workspace at a glance."""

from __future__ import annotations

from flask import render_template

from app.auth.guards import guard
from app.services import audit, members
from app.tenancy import current_tenant
from app.web import bp


@bp.get("/")
@guard()
def dashboard():
    tenant = current_tenant()
    return render_template(
        "dashboard.html", tenant=tenant, members_count=members.count_members(tenant),
        recent=audit.list_recent(tenant, 10),
    )
