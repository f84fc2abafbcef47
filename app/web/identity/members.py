"""Members: who belongs to the workspace, with which role; invite, change role, remove."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import current_app, flash, redirect, render_template, request, url_for
from flask_wtf import FlaskForm
from wtforms import EmailField, SelectField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Length, Regexp

from app.auth.guards import guard
from app.errors import AppError
from app.extensions import db, htmx
from app.models import Invitation, Membership, Role
from app.models.types import utcnow
from app.services.identity import invitations as invitation_service
from app.services.identity import members as member_service
from app.tenancy import current_tenant, get_or_404, principal
from app.web import bp
from app.web._helpers import attach_error, confirm_page, done, page_or_fragment

ROLE_LABELS = [(role.value, role.value.capitalize()) for role in Role]
# Contributor is a reference role with a viewer's rights here (no route asks for it; any
# member may run sessions, decisions 7): the page offers it to nobody, for an invitation
# or a role change. Members who have it keep it; the API still accepts it (docs/deviations.md).
NOT_OFFERED = {Role.contributor}
PER_PAGE = 50
QUERY_MAX = 254
# What each role can do beyond the one below it (from the guards of the routes): a role
# change names what the member gains or loses. A contributor has no route of its own.
ROLE_ADDS: dict[Role, tuple[str, ...]] = {
    Role.viewer: (),
    Role.contributor: (),
    Role.admin: ("create, change and delete sandbox configs and skills",
                 "invite, re-role and remove members", "manage API keys",
                 "end other members' sessions"),
    Role.owner: ("make, change and remove owners",),
}


def grantable_roles(actor_role: Role) -> list[tuple[str, str]]:
    """Roles the actor may hand out: only an owner can make an owner."""
    return [(value, label) for value, label in ROLE_LABELS
            if Role(value) not in NOT_OFFERED
            and (value != Role.owner.value or actor_role == Role.owner)]


def offered_roles(actor_role: Role, membership: Membership, owners: int) -> list[Role]:
    """The roles a member's row offers: what the service would accept, less NOT_OFFERED."""
    return [role for role in member_service.role_choices(actor_role, membership, owners)
            if role not in NOT_OFFERED]


class InviteForm(FlaskForm):
    email = EmailField("Email", validators=[
        DataRequired(message="Enter their email address."), Length(max=254),
        Regexp(r"^[^@\s]+@[^@\s]+$", message="Enter an email address."),
    ])
    role = SelectField("Role", default=Role.viewer.value)

    def __init__(self, actor_role: Role, **kwargs):
        super().__init__(**kwargs)
        self.role.choices = [SelectChoice(v, label) for v, label in grantable_roles(actor_role)]


class RoleForm(FlaskForm):
    role = SelectField("Role", choices=[SelectChoice(v, label) for v, label in ROLE_LABELS
                                        if Role(v) not in NOT_OFFERED])


def role_change(old: Role, new: Role) -> dict[str, Any]:
    """What moving a member from `old` to `new` gives or takes away, for the confirm step."""
    low, high = sorted((old, new), key=lambda role: role.rank)
    powers = [p for role in Role if low.rank < role.rank <= high.rank for p in ROLE_ADDS[role]]
    return {"gains": powers if new.rank > old.rank else [],
            "loses": powers if new.rank < old.rank else []}


def _listing() -> tuple[str, int]:
    """Search and page: from the query string, or (after an htmx post) the page's URL."""
    args: dict[str, list[str]] = {k: request.args.getlist(k) for k in ("q", "page")}
    if htmx and request.method == "POST" and htmx.current_url:
        args = parse_qs(urlsplit(htmx.current_url).query)
    query = " ".join((args.get("q") or [""])[0].split())[:QUERY_MAX]
    raw = (args.get("page") or ["1"])[0]
    return query, int(raw) if raw.isdigit() and len(raw) < 7 else 1


def _context(form: InviteForm | None = None, created=None, query: str | None = None,
             confirming: tuple[int, Role] | None = None) -> dict:
    who = principal()
    search, page = _listing()
    listing = member_service.page_members(
        current_tenant(), search if query is None else query, page, PER_PAGE)
    return {
        "tenant": current_tenant(), "listing": listing, "memberships": listing.rows,
        "choices": lambda m: offered_roles(who.role, m, listing.owners),
        "removable": lambda m: member_service.may_remove(who.role, m, listing.owners),
        "confirming": confirming, "role_change": role_change,
        "invitations": invitation_service.list_invitations(current_tenant()), "now": utcnow(),
        "form": form or InviteForm(who.role, formdata=None), "actor_role": who.role,
        "me": who.user, "created": created,
        "ttl_days": max(1, current_app.config["INVITATION_TTL_HOURS"] // 24),
    }


@bp.get("/members")
@guard(Role.admin)
def members():
    return page_or_fragment("members/index.html", "members/_table.html", **_context())


@bp.get("/members/<int:membership_id>/row")
@guard(Role.admin)
def member_row(membership_id: int):
    """One member's row; with `?role=`, the step that confirms that role change.

    Without JavaScript the row's form lands here, so the whole page is shown with the row
    asking to confirm. A role the row would not offer shows the row as it is."""
    membership = get_or_404(Membership, membership_id, "member")
    who = principal()
    owners = member_service.count_owners(current_tenant())
    asked = request.args.get("role", "")
    offered = offered_roles(who.role, membership, owners)
    confirming = (membership.id, Role(asked)) if asked in {r.value for r in offered} else None
    if not htmx:
        return render_template("members/index.html", **_context(
            query=membership.user.email, confirming=confirming))
    return render_template("members/_row.html", m=membership, **_context(confirming=confirming))


@bp.post("/members/invitations")
@guard(Role.admin)
def create_invitation():
    who = principal()
    form = InviteForm(who.role)
    status = 400
    if form.validate_on_submit():
        try:
            invitation, token = invitation_service.create_invitation(
                current_tenant(), who, who.role, form.email.data, Role(form.role.data))
        except AppError as err:
            attach_error(form, err)
            status = err.status
        else:
            # The link lives only in this response: never in the session, a flash or a log.
            link = url_for("web.accept_invitation", token=token, _external=True)
            response = page_or_fragment("members/index.html", "members/_panel.html", 201,
                                        **_context(created=(invitation, link)))
            return (*response, {"Cache-Control": "no-store"})
    return page_or_fragment("members/index.html", "members/_panel.html", status,
                            **_context(form))


@bp.get("/members/invitations/<int:invitation_id>/revoke")
@guard(Role.admin)
def confirm_revoke_invitation(invitation_id: int):
    """Without JavaScript the Revoke button lands here and asks first."""
    invitation = get_or_404(Invitation, invitation_id, "invitation")
    return confirm_page(f"Revoke the invitation of {invitation.email}?", "Revoke",
                        url_for("web.revoke_invitation", invitation_id=invitation.id),
                        url_for("web.members"), "Its link stops working at once.")


@bp.post("/members/invitations/<int:invitation_id>/revoke")
@guard(Role.admin)
def revoke_invitation(invitation_id: int):
    invitation = get_or_404(Invitation, invitation_id, "invitation")
    who = principal()
    try:
        invitation_service.revoke_invitation(current_tenant(), who, who.role, invitation)
    except AppError as err:
        db.session.rollback()
        return done(err.message, "members/_panel.html", url_for("web.members"), err.status,
                    category="error", **_context())
    return done(f"Revoked the invitation of {invitation.email}. Its link no longer works.",
                "members/_panel.html", url_for("web.members"), **_context())


@bp.post("/members/<int:membership_id>/role")
@guard(Role.admin)
def change_member_role(membership_id: int):
    membership = get_or_404(Membership, membership_id, "member")
    form = RoleForm()
    if not form.validate_on_submit():
        return _failed("Choose one of the listed roles.", 400)
    who = principal()
    try:
        member_service.change_role(current_tenant(), who, who.role, membership,
                                   Role(form.role.data))
    except AppError as err:
        return _failed(err.message, err.status)
    message = f"{membership.user.email} is now {membership.role.value}."
    if membership.user_id == who.user.id and not membership.role.at_least(Role.admin):
        return _left(message)
    return done(message, "members/_table.html", url_for("web.members"), **_context())


@bp.get("/members/<int:membership_id>/remove")
@guard(Role.admin)
def confirm_remove_member(membership_id: int):
    """Without JavaScript the Remove button lands here and asks first."""
    membership = get_or_404(Membership, membership_id, "member")
    detail = "The API keys they created are revoked and their sandboxes destroyed."
    if membership.user_id == principal().user.id:
        detail += " You will lose access to this workspace."
    return confirm_page(f"Remove {membership.user.email} from {current_tenant().name}?",
                        "Remove", url_for("web.remove_member", membership_id=membership.id),
                        url_for("web.members"), detail)


@bp.post("/members/<int:membership_id>/remove")
@guard(Role.admin)
def remove_member(membership_id: int):
    membership = get_or_404(Membership, membership_id, "member")
    who = principal()
    email, yourself = membership.user.email, membership.user_id == who.user.id
    try:
        member_service.remove_member(current_tenant(), who, who.role, membership)
    except AppError as err:
        return _failed(err.message, err.status)
    message = f"Removed {email} from {current_tenant().name}."
    if yourself:
        return _left(message)
    return done(message, "members/_table.html", url_for("web.members"), **_context())


def _failed(message: str, status: int):
    """Re-render the table as it really is (the select may show a rejected value)."""
    db.session.rollback()
    return done(message, "members/_table.html", url_for("web.members"), status,
                category="error", **_context())


def _left(message: str):
    """The actor just gave up their own admin access: leave the members page."""
    flash(message, "success")
    if htmx:
        return "", 204, {"HX-Redirect": url_for("web.dashboard")}
    return redirect(url_for("web.dashboard"))
