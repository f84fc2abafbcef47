"""Invitations: an admin invites an email with a role; the invitee accepts with the link's
token while signed in as that email (decisions 11)."""

from __future__ import annotations

from datetime import datetime

from flask import url_for
from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.api.schemas import MembershipRef
from app.auth.guards import guard
from app.models import Invitation, InvitationStatus, Role
from app.models.types import utcnow
from app.services.identity import invitations
from app.tenancy import current_tenant, get_or_404, principal


class InvitationOut(Out):
    id: int
    email: str
    role: Role
    status: InvitationStatus = Field(description="pending, accepted, revoked or expired")
    created_at: datetime
    expires_at: datetime
    invited_by: str | None = Field(description="The inviting member's email, if still known")
    accepted_at: datetime | None


class InvitationCreatedOut(InvitationOut):
    accept_url: str = Field(description="The link to send to the invitee. Shown only here, "
                                        "once: only a hash of its token is stored.")


class InvitationIn(Strict):
    email: str = Field(min_length=3, max_length=254)
    role: Role


class AcceptIn(Strict):
    token: str = Field(min_length=1, max_length=200, description="The last part of the link")


def _out(invitation: Invitation) -> dict:
    return project(InvitationOut, _fields(invitation))


def _fields(invitation: Invitation) -> dict:
    return {
        "id": invitation.id, "email": invitation.email, "role": invitation.role,
        "status": invitation.state(utcnow()), "created_at": invitation.created_at,
        "expires_at": invitation.expires_at, "accepted_at": invitation.accepted_at,
        "invited_by": invitation.invited_by.email if invitation.invited_by else None,
    }


@bp.get("/invitations")
@guard(Role.admin)
@doc("List the workspace's invitations with their status, newest first", query=PageQuery,
     response=InvitationOut, many=True, errors=(400,))
def list_invitations():
    page = invitations.invitations_page(current_tenant(), window(parse_query(PageQuery)))
    return ok_page(page, _out)


@bp.post("/invitations")
@guard(Role.admin)
@doc("Invite an email to the workspace; the answer is the same whether it has an account",
     request=InvitationIn, response=InvitationCreatedOut, status=201, errors=(400, 403, 409))
def create_invitation():
    body = parse_body(InvitationIn)
    who = principal()
    invitation, token = invitations.create_invitation(current_tenant(), who, who.role,
                                                      body.email, body.role)
    link = url_for("web.accept_invitation", token=token, _external=True)
    return ok(project(InvitationCreatedOut, {**_fields(invitation), "accept_url": link}), 201)


@bp.post("/invitations/<int:invitation_id>/revoke")
@guard(Role.admin)
@doc("Revoke a pending invitation", response=InvitationOut, errors=(403, 404, 409))
def revoke_invitation(invitation_id: int):
    invitation = get_or_404(Invitation, invitation_id, "invitation")
    who = principal()
    return ok(_out(invitations.revoke_invitation(current_tenant(), who, who.role, invitation)))


@bp.post("/invitations/accept")
@guard()
@doc("Accept an invitation as the signed-in person it was sent to (bearer token only)",
     request=AcceptIn, response=MembershipRef, errors=(400, 403, 404, 409, 410))
def accept_invitation():
    body = parse_body(AcceptIn)
    invitation = invitations.find_by_token(body.token)
    membership = invitations.accept(invitation, principal().user)
    return ok(MembershipRef(tenant_id=membership.tenant_id, tenant_name=membership.tenant.name,
                            role=membership.role).model_dump(mode="json"))
