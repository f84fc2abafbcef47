"""The accept page of an invitation link (decisions 11).

Signed in as the invited email: one button joins. Signed in as someone else: nothing to do
but sign out. Not signed in: sign in with the invited account's password, or, for a person
new to Sandlot, choose a password. The page shows both choices to every anonymous visitor,
so opening a link does not tell whether its email has an account.

The token stays in the URL only: forms post back to the same address (no action), so the
page body never repeats it, and `Referrer-Policy: no-referrer` keeps it out of other sites'
logs.
"""

from __future__ import annotations

from flask import flash, redirect, render_template, request, session, url_for
from flask_login import current_user
from flask_wtf import FlaskForm
from wtforms import HiddenField, PasswordField
from wtforms.validators import AnyOf, DataRequired, EqualTo, Length

from app.auth.guards import public
from app.auth.loaders import TENANT_SESSION_KEY
from app.auth.ratelimit import login_limits
from app.errors import AppError, Gone, NotFound
from app.models import Invitation, Membership
from app.services.identity import invitations
from app.web import bp
from app.web._helpers import attach_error
from app.web.identity.auth import sign_in

NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


class JoinForm(FlaskForm):
    action = HiddenField(default="join", validators=[AnyOf(["join"])])


class SignInForm(FlaskForm):
    action = HiddenField(default="signin", validators=[AnyOf(["signin"])])
    password = PasswordField("Password", validators=[
        DataRequired(message="Enter your password."), Length(max=1024)])


class NewAccountForm(FlaskForm):
    action = HiddenField(default="create", validators=[AnyOf(["create"])])
    new_password = PasswordField("Choose a password", validators=[
        DataRequired(message="Choose a password."), Length(max=1024)])
    confirm = PasswordField("Repeat the password", validators=[
        DataRequired(message="Repeat the password."),
        EqualTo("new_password", message="The two passwords do not match.")])


@bp.route("/invite/<token>", methods=["GET", "POST"])
@login_limits  # signing in with a password here is a sign-in like any other
@public
def accept_invitation(token: str):
    try:
        invitation = invitations.find_by_token(token)
        invitations.check_usable(invitation)
    except (NotFound, Gone) as err:
        return _unusable(err)
    forms = {"join": JoinForm(formdata=None), "signin": SignInForm(formdata=None),
             "create": NewAccountForm(formdata=None)}
    status = 200
    if request.method == "POST":
        chosen = request.form.get("action", "")
        form = {"join": JoinForm, "signin": SignInForm, "create": NewAccountForm}.get(chosen)
        if form is None:
            return _page(invitation, forms, 400)
        forms[chosen] = form()
        try:
            membership = _accept(invitation, chosen, forms[chosen])
        except (NotFound, Gone) as err:
            return _unusable(err)
        except AppError as err:
            attach_error(forms[chosen], err)
            status = err.status
        else:
            if membership is not None:
                return _joined(membership)
            status = 400
    return _page(invitation, forms, status)


def _accept(invitation: Invitation, chosen: str, form: FlaskForm) -> Membership | None:
    """Accept the way the visitor chose; None when the form itself is not valid."""
    if not form.validate_on_submit():
        return None
    if chosen == "join":
        if not current_user.is_authenticated:
            form.form_errors.append("Your session ended: sign in to accept.")
            return None
        return invitations.accept(invitation, current_user)
    if chosen == "signin":
        membership = invitations.accept_with_password(invitation, form.password.data)
    else:
        membership = invitations.accept_as_new(invitation, form.new_password.data)
    sign_in(membership.user, membership.tenant_id)
    return membership


def _joined(membership: Membership):
    session[TENANT_SESSION_KEY] = membership.tenant_id
    flash(f"You joined {membership.tenant.name} as {membership.role.value}.", "success")
    return redirect(url_for("web.dashboard"))


def _page(invitation: Invitation, forms: dict, status: int):
    me = current_user if current_user.is_authenticated else None
    html = render_template("invitations/accept.html", invitation=invitation, me=me,
                           forms=forms, bare_layout=True)
    return html, status, NO_STORE


def _unusable(err: AppError):
    html = render_template("invitations/unusable.html", message=err.message, bare_layout=True)
    return html, err.status, NO_STORE
