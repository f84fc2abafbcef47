"""Workspace members: list, change role, remove (admins and owners). People join by
invitation (`api.invitations`)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.auth.guards import guard
from app.models import Membership, Role
from app.services.identity import members
from app.tenancy import current_tenant, get_or_404, principal


class MemberOut(Out):
    id: int = Field(description="The membership id")
    user_id: int
    email: str
    role: Role
    created_at: datetime


class RoleIn(Strict):
    role: Role


def _out(membership: Membership) -> dict:
    return project(MemberOut, {
        "id": membership.id, "user_id": membership.user_id, "email": membership.user.email,
        "role": membership.role, "created_at": membership.created_at,
    })


@bp.get("/members")
@guard(Role.admin)
@doc("List the workspace's members, by email", query=PageQuery,
     response=MemberOut, many=True, errors=(400,))
def list_members():
    page = members.members_page(current_tenant(), window(parse_query(PageQuery)))
    return ok_page(page, _out)


@bp.patch("/members/<int:member_id>")
@guard(Role.admin)
@doc("Change a member's role", request=RoleIn, response=MemberOut, errors=(400, 403, 404, 409))
def change_role(member_id: int):
    body = parse_body(RoleIn)
    membership = get_or_404(Membership, member_id, "member")
    who = principal()
    return ok(_out(members.change_role(current_tenant(), who, who.role, membership, body.role)))


@bp.delete("/members/<int:member_id>")
@guard(Role.admin)
@doc("Remove a member; revokes the API keys they created and ends their sandboxes",
     response=MemberOut, errors=(403, 404, 409))
def remove_member(member_id: int):
    membership = get_or_404(Membership, member_id, "member")
    who = principal()
    data = _out(membership)
    members.remove_member(current_tenant(), who, who.role, membership)
    return ok(data)
