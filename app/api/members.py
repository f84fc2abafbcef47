"""Workspace members: list, add, change role, remove (admins and owners)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, project
from app.auth.guards import guard
from app.models import Membership, Role
from app.services import members
from app.tenancy import current_tenant, get_or_404, principal


class MemberOut(Out):
    id: int = Field(description="The membership id")
    user_id: int
    email: str
    role: Role
    created_at: datetime


class MemberIn(Strict):
    email: str = Field(min_length=3, max_length=254)
    role: Role
    password: str | None = Field(default=None, max_length=1024,
                                 description="Initial password, required for a new user")


class RoleIn(Strict):
    role: Role


def _out(membership: Membership) -> dict:
    return project(MemberOut, {
        "id": membership.id, "user_id": membership.user_id, "email": membership.user.email,
        "role": membership.role, "created_at": membership.created_at,
    })


@bp.get("/members")
@guard(Role.admin)
@doc("List the workspace's members", response=MemberOut, many=True)
def list_members():
    return ok([_out(m) for m in members.list_members(current_tenant())])


@bp.post("/members")
@guard(Role.admin)
@doc("Add a user to the workspace", request=MemberIn, response=MemberOut, status=201,
     errors=(400, 403, 409))
def add_member():
    body = parse_body(MemberIn)
    who = principal()
    membership = members.add_member(current_tenant(), who, who.role, body.email, body.role,
                                    body.password)
    return ok(_out(membership), 201)


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
@doc("Remove a member from the workspace", response=MemberOut, errors=(403, 404, 409))
def remove_member(member_id: int):
    membership = get_or_404(Membership, member_id, "member")
    who = principal()
    data = _out(membership)
    members.remove_member(current_tenant(), who, who.role, membership)
    return ok(data)
