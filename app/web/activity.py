"""The workspace's activity as sentences, all of it: filter by kind of action and by
member, 50 to a page (issue 15 item 2)."""

from __future__ import annotations

from flask import render_template, request

from app.auth.guards import guard
from app.models import Role
from app.services import audit
from app.services.identity import members
from app.tenancy import current_tenant
from app.web import bp


def _int(name: str) -> int | None:
    value = request.args.get(name, "")
    return int(value) if value.isdigit() and len(value) < 19 else None


@bp.get("/activity")
@guard(Role.viewer)
def activity():
    tenant = current_tenant()
    kind = request.args.get("kind", "")
    kind = kind if kind in audit.KINDS else ""
    people = [(m.user.id, m.user.email) for m in members.list_members(tenant)]
    member = _int("member")
    member = member if member in {p[0] for p in people} else None
    events, next_before = audit.page(tenant, kind, member, _int("before"))
    return render_template("activity.html", events=events, next_before=next_before,
                           kinds=audit.KINDS, kind=kind, people=people, member=member,
                           first=_int("before") is None)
