"""Sign in, sign out, switch workspace."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user
from flask_wtf import FlaskForm
from wtforms import EmailField, PasswordField
from wtforms.validators import DataRequired, Length

from app.auth.guards import guard, public
from app.auth.loaders import TENANT_SESSION_KEY
from app.auth.ratelimit import login_limits
from app.errors import AppError, NotFound
from app.services.identity import login_sessions, users
from app.web import bp
from app.web.redirects import safe_next


class LoginForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired(), Length(max=254)])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=1024)])


@bp.route("/login", methods=["GET", "POST"])
@login_limits
@public
def login():
    form = LoginForm()
    if form.validate_on_submit():
        try:
            membership = users.authenticate(form.email.data, form.password.data)
        except AppError as err:
            form.password.errors.append(err.message)
        else:
            sign_in(membership.user, membership.tenant_id)
            return redirect(safe_next(request.args.get("next")))
    status = 401 if form.is_submitted() and form.errors else 200
    return render_template("auth/login.html", form=form, bare_layout=True), status


def sign_in(user, tenant_id: int) -> None:
    """Start a server-side sign-in and put its id in a fresh session cookie."""
    session.clear()
    sid = login_sessions.start(user)
    login_user(user)
    session[login_sessions.SESSION_KEY] = sid
    session[TENANT_SESSION_KEY] = tenant_id


def rate_limited_page():
    """A refused sign-in shows the form again with a plain reason (429)."""
    form = LoginForm()
    form.form_errors.append("Too many sign-in attempts. Wait a few minutes and try again.")
    return render_template("auth/login.html", form=form, bare_layout=True), 429


@bp.post("/logout")
@guard()
def logout():
    # End the sign-in on the server first: a copy of this cookie must not outlive it.
    login_sessions.end(session.get(login_sessions.SESSION_KEY))
    logout_user()
    session.clear()
    flash("You are signed out.", "info")
    return redirect(url_for("web.login"))


@bp.post("/switch-tenant/<int:tenant_id>")
@guard()
def switch_tenant(tenant_id: int):
    membership = next((m for m in current_user.memberships if m.tenant_id == tenant_id), None)
    if membership is None:
        raise NotFound("No such workspace.")
    session[TENANT_SESSION_KEY] = tenant_id
    flash(f"Switched to {membership.tenant.name}.", "info")
    return redirect(url_for("web.dashboard"))
