"""Workspace membership: who belongs, with which role, and the owner rules.

People join by invitation only (`services.invitations`); the operator's CLI is the one
other way in."""

from __future__ import annotations

from sqlalchemy import func, select

from app.errors import Conflict, Forbidden, NotFound
from app.extensions import db
from app.models import Membership, Role, Tenant, User
from app.services import Actor, audit, member_exit, paging


def pick_membership(user: User, tenant_id: int | None) -> Membership | None:
    """The membership for `tenant_id`, else the user's first one (by tenant id)."""
    memberships = sorted(user.memberships, key=lambda m: m.tenant_id)
    for membership in memberships:
        if membership.tenant_id == tenant_id:
            return membership
    return memberships[0] if memberships else None


def list_members(tenant: Tenant) -> list[Membership]:
    query = (
        select(Membership).join(User).where(Membership.tenant_id == tenant.id)
        .order_by(User.email)
    )
    return list(db.session.scalars(query))


def members_page(tenant: Tenant, window: paging.Window) -> paging.Slice[Membership]:
    """One page of the workspace's members, by email."""
    query = select(Membership).join(User).where(Membership.tenant_id == tenant.id)
    return paging.keyset(query, (User.email, Membership.id), window,
                         key_of=lambda m: (m.user.email, m.id))


def count_members(tenant: Tenant) -> int:
    query = select(func.count()).select_from(Membership).where(Membership.tenant_id == tenant.id)
    return db.session.scalar(query) or 0


def get_member(tenant: Tenant, membership_id: int) -> Membership:
    membership = db.session.get(Membership, membership_id)
    if membership is None or membership.tenant_id != tenant.id:
        raise NotFound("No such member in this workspace.")
    return membership


def change_role(
    tenant: Tenant, actor: Actor, actor_role: Role, membership: Membership, role: Role,
) -> Membership:
    if membership.role == role:
        return membership
    check_may_grant(actor_role, membership.role)
    check_may_grant(actor_role, role)
    if membership.role == Role.owner:
        _keep_an_owner(tenant, "demote")
    previous = membership.role
    membership.role = role
    audit.record(tenant, actor, "member.role_changed", "membership", membership.id,
                 {"email": membership.user.email, "from": previous.value, "to": role.value})
    db.session.commit()
    return membership


def remove_member(tenant: Tenant, actor: Actor, actor_role: Role, membership: Membership) -> None:
    """Remove a member; the API keys they created go with them, and so do their sandboxes."""
    check_may_grant(actor_role, membership.role)
    if membership.role == Role.owner:
        _keep_an_owner(tenant, "remove")
    user = membership.user
    audit.record(tenant, actor, "member.removed", "membership", membership.id,
                 {"email": user.email, "role": membership.role.value})
    db.session.delete(membership)
    member_exit.revoke_keys_of(tenant, actor, user)
    db.session.commit()
    member_exit.schedule_session_end(tenant, actor, user.id)


def check_may_grant(actor_role: Role, role: Role) -> None:
    """Only owners may grant, change or take away the owner role."""
    if role == Role.owner and actor_role != Role.owner:
        raise Forbidden("Only an owner can change an owner's membership or make an owner.")


def _keep_an_owner(tenant: Tenant, verb: str) -> None:
    owners = db.session.scalar(
        select(func.count()).select_from(Membership)
        .where(Membership.tenant_id == tenant.id, Membership.role == Role.owner)
    )
    if (owners or 0) <= 1:
        raise Conflict(f"Cannot {verb} the last owner: make someone else an owner first.")
