"""The home page: the workspace at a glance."""

from __future__ import annotations

from flask import render_template

from app.auth.guards import guard
from app.models import Role
from app.models.types import utcnow
from app.services import api_keys, audit, members
from app.tenancy import current_tenant, principal
from app.web import bp


@bp.get("/")
@guard()
def dashboard():
    tenant = current_tenant()
    active_keys = None
    if principal().role.at_least(Role.admin):
        now = utcnow()
        active_keys = sum(1 for key in api_keys.list_keys(tenant) if key.is_usable(now))
    return render_template(
        "dashboard.html", tenant=tenant, members_count=members.count_members(tenant),
        active_keys=active_keys, recent=audit.list_recent(tenant, 10),
    )
