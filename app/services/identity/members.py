"""Workspace membership: who belongs, with which role, and the owner rules.

People join by invitation only (`services.invitations`); the operator's CLI is the one
other way in."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import contains_eager

from app.errors import Conflict, Forbidden
from app.extensions import db
from app.models import Membership, Role, Tenant, User
from app.services import Actor, audit, paging
from app.services.identity import member_exit
from app.tenancy import owned_or_404


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


@dataclass(frozen=True)
class MemberPage:
    """One page of a workspace's members, and what is needed to offer only legal changes."""

    rows: list[Membership]
    total: int  # members matching `query`
    page: int
    per_page: int
    query: str
    owners: int  # owners in the whole workspace (the last one cannot be demoted)

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def page_members(tenant: Tenant, query: str = "", page: int = 1,
                 per_page: int = 50) -> MemberPage:
    """Members whose email contains `query`, by email, page `page` (clamped to the last).

    Three statements whatever the size: the count, the owners, the page with its users."""
    where = [Membership.tenant_id == tenant.id]
    if query:
        pattern = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append(func.lower(User.email).like(f"%{pattern}%", escape="\\"))
    total = db.session.scalar(
        select(func.count()).select_from(Membership).join(User).where(*where)) or 0
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    rows = db.session.scalars(
        select(Membership).join(Membership.user).options(contains_eager(Membership.user))
        .where(*where).order_by(User.email).offset((page - 1) * per_page).limit(per_page))
    return MemberPage(list(rows), total, page, per_page, query, count_owners(tenant))


def count_owners(tenant: Tenant) -> int:
    return db.session.scalar(
        select(func.count()).select_from(Membership)
        .where(Membership.tenant_id == tenant.id, Membership.role == Role.owner)) or 0


def role_choices(actor_role: Role, membership: Membership, owners: int) -> list[Role]:
    """The roles `actor_role` may move `membership` to, as `change_role` would accept them.

    A page offers exactly these, so no row proposes a change the server refuses."""
    if not actor_role.at_least(Role.admin):
        return []
    if membership.role == Role.owner and (actor_role != Role.owner or owners <= 1):
        return []
    return [role for role in Role if role != membership.role
            and (role != Role.owner or actor_role == Role.owner)]


def may_remove(actor_role: Role, membership: Membership, owners: int) -> bool:
    """Whether `remove_member` would accept `actor_role` removing `membership`."""
    if not actor_role.at_least(Role.admin):
        return False
    if membership.role == Role.owner:
        return actor_role == Role.owner and owners > 1
    return True


def members_page(tenant: Tenant, window: paging.Window) -> paging.Slice[Membership]:
    """One page of the workspace's members, by email."""
    query = select(Membership).join(User).where(Membership.tenant_id == tenant.id)
    return paging.keyset(query, (User.email, Membership.id), window,
                         key_of=lambda m: (m.user.email, m.id))


def count_members(tenant: Tenant) -> int:
    query = select(func.count()).select_from(Membership).where(Membership.tenant_id == tenant.id)
    return db.session.scalar(query) or 0


def get_member(tenant: Tenant, membership_id: int) -> Membership:
    return owned_or_404(Membership, membership_id, tenant.id, "No such member in this workspace.",
                        live=False)


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
    """Remove a member; the API keys they created and their personal variable values go
    with them in the same transaction, and their sandboxes follow by a job."""
    check_may_grant(actor_role, membership.role)
    if membership.role == Role.owner:
        _keep_an_owner(tenant, "remove")
    user_id = membership.user_id
    member_exit.leave(tenant, actor, membership, "member removed")
    db.session.commit()
    member_exit.schedule_session_end(tenant, actor, user_id)


def check_may_grant(actor_role: Role, role: Role) -> None:
    """Only owners may grant, change or take away the owner role."""
    if role == Role.owner and actor_role != Role.owner:
        raise Forbidden("Only an owner can change an owner's membership or make an owner.")


def _keep_an_owner(tenant: Tenant, verb: str) -> None:
    if count_owners(tenant) <= 1:
        raise Conflict(f"Cannot {verb} the last owner: make someone else an owner first.")
