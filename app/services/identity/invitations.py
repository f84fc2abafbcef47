"""Invitations (decisions 11): how a workspace admin adds a person.

The admin names an email and a role; the answer is a single-use link, the same whether
that email has an account or not. Only the invitee decides: signed in as that email they
join, or, when the email has no account yet, they choose their own password. No admin
ever sets or learns a password. The token is shown once; only its sha256 is stored.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from flask import current_app
from sqlalchemy import select, update

from app.errors import Conflict, Forbidden, Gone, NotFound, Unauthorized, ValidationFailed
from app.extensions import db
from app.models import Invitation, InvitationStatus, Membership, Role, Tenant, User
from app.models.types import utcnow
from app.services import Actor, audit, paging
from app.services.identity import members, users

MAX_TOKEN_LENGTH = 128
INVALID_LINK = "This invitation link is not valid. Check that you copied all of it."


class UserActor:
    """The invitee as the actor of their own acceptance."""

    def __init__(self, user: User):
        self.actor_id, self.actor_label = user.id, user.email


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_invitation(tenant: Tenant, actor: Actor, actor_role: Role, email: str,
                      role: Role) -> tuple[Invitation, str]:
    """A pending invitation and its token (the token is never stored, only its digest).

    Nothing here looks at whether `email` has an account: the answer must not depend on it.
    """
    members.check_may_grant(actor_role, role)
    email = _valid_email(email)
    if _is_member(tenant, email):  # the admin sees this in the member list anyway
        raise Conflict(f"{email} is already a member of this workspace.")
    if _pending_for(tenant, email) is not None:
        raise Conflict(f"{email} already has a pending invitation: revoke it to send a new one.")
    token = secrets.token_urlsafe(32)
    ttl = timedelta(hours=current_app.config.get("INVITATION_TTL_HOURS", 168))
    invitation = Invitation(tenant_id=tenant.id, email=email, role=role,
                            token_digest=digest(token), status=InvitationStatus.pending,
                            invited_by_id=actor.actor_id, expires_at=utcnow() + ttl)
    db.session.add(invitation)
    db.session.flush()
    audit.record(tenant, actor, "invitation.created", "invitation", invitation.id,
                 {"email": email, "role": role.value})
    db.session.commit()
    return invitation, token


def list_invitations(tenant: Tenant) -> list[Invitation]:
    query = (select(Invitation).where(Invitation.tenant_id == tenant.id)
             .order_by(Invitation.created_at.desc(), Invitation.id.desc()))
    return list(db.session.scalars(query))


def invitations_page(tenant: Tenant, window: paging.Window) -> paging.Slice[Invitation]:
    """One page of the workspace's invitations, newest first."""
    query = select(Invitation).where(Invitation.tenant_id == tenant.id)
    return paging.keyset(query, (Invitation.created_at, Invitation.id), window, desc=True)


def revoke_invitation(tenant: Tenant, actor: Actor, actor_role: Role,
                      invitation: Invitation) -> Invitation:
    """Make a pending link unusable."""
    members.check_may_grant(actor_role, invitation.role)
    state = invitation.state(utcnow())
    if state != InvitationStatus.pending:
        raise Conflict(f"This invitation is already {state.value}.")
    invitation.status, invitation.revoked_at = InvitationStatus.revoked, utcnow()
    audit.record(tenant, actor, "invitation.revoked", "invitation", invitation.id,
                 {"email": invitation.email, "role": invitation.role.value})
    db.session.commit()
    return invitation


def find_by_token(token: str) -> Invitation:
    """The invitation a link names, whatever its state; an unknown link is a 404."""
    if not token or len(token) > MAX_TOKEN_LENGTH or "\x00" in token:
        raise NotFound(INVALID_LINK)
    invitation = db.session.scalar(
        select(Invitation).where(Invitation.token_digest == digest(token)))
    if invitation is None:
        raise NotFound(INVALID_LINK)
    return invitation


def check_usable(invitation: Invitation) -> None:
    """Refuse a used, revoked or expired invitation with a message that says which."""
    state = invitation.state(utcnow())
    if state == InvitationStatus.accepted:
        raise Gone("This invitation was already used. Sign in to reach the workspace.")
    if state == InvitationStatus.revoked:
        raise Gone("This invitation was revoked. Ask the workspace admin for a new one.")
    if state == InvitationStatus.expired:
        raise Gone("This invitation has expired. Ask the workspace admin for a new one.")


def accept(invitation: Invitation, user: User) -> Membership:
    """The signed-in `user` accepts: only the invited email may, and only once."""
    check_usable(invitation)
    if users.normalise_email(user.email) != invitation.email:
        raise Forbidden("This invitation is for another email address. Sign in as the "
                        "invited person to accept it.")
    if _is_member(invitation.tenant, invitation.email):
        raise Conflict(f"You are already a member of {invitation.tenant.name}.")
    # Single use even under two concurrent accepts: only one conditional UPDATE wins.
    claimed = db.session.execute(
        update(Invitation)
        .where(Invitation.id == invitation.id, Invitation.status == InvitationStatus.pending)
        .values(status=InvitationStatus.accepted, accepted_by_id=user.id, accepted_at=utcnow()))
    if claimed.rowcount != 1:
        db.session.rollback()
        raise Gone("This invitation was already used. Sign in to reach the workspace.")
    membership = users.grant(invitation.tenant, user, invitation.role)
    audit.record(invitation.tenant, UserActor(user), "invitation.accepted", "invitation",
                 invitation.id, {"email": invitation.email, "role": invitation.role.value})
    db.session.commit()
    db.session.refresh(invitation)
    return membership


def accept_as_new(invitation: Invitation, password: str) -> Membership:
    """A person without an account accepts by choosing their own password."""
    check_usable(invitation)
    if users.find_user(invitation.email) is not None:
        raise Conflict("An account with this email already exists: sign in with it to accept.")
    user = users.create_user(invitation.email, password)
    try:
        return accept(invitation, user)
    except Exception:
        db.session.rollback()  # nothing half-written: no account without the membership
        raise


def accept_with_password(invitation: Invitation, password: str) -> Membership:
    """An existing account accepts by proving it is theirs (its password)."""
    check_usable(invitation)
    user = users.verify_password(invitation.email, password)
    if user is None:
        raise Unauthorized("Email or password is incorrect.")
    return accept(invitation, user)


def _valid_email(email: str) -> str:
    email = users.normalise_email(email)
    local, at, domain = email.partition("@")
    if not (local and at and domain) or any(c.isspace() or c == "\x00" for c in email) \
            or len(email) > 254:
        raise ValidationFailed.one("email", "Enter an email address.")
    return email


def _is_member(tenant: Tenant, email: str) -> bool:
    query = (select(Membership.id).join(User)
             .where(Membership.tenant_id == tenant.id, User.email == email))
    return db.session.scalar(query) is not None


def _pending_for(tenant: Tenant, email: str) -> Invitation | None:
    query = select(Invitation).where(
        Invitation.tenant_id == tenant.id, Invitation.email == email,
        Invitation.status == InvitationStatus.pending, Invitation.expires_at > utcnow())
    return db.session.scalar(query)
