"""Your account: the password that every workspace shares, and where you are a member."""

from __future__ import annotations

from flask import flash, redirect, render_template, session, url_for
from flask_login import login_user
from flask_wtf import FlaskForm
from wtforms import PasswordField
from wtforms.validators import DataRequired, EqualTo, Length

from app.auth.guards import guard
from app.errors import AppError
from app.extensions import db
from app.services.identity import login_sessions, users
from app.tenancy import principal
from app.web import bp
from app.web._helpers import attach_error


class ChangePasswordForm(FlaskForm):
    current_password = PasswordField("Current password", validators=[
        DataRequired(message="Enter your current password."), Length(max=1024),
    ])
    new_password = PasswordField("New password", validators=[
        DataRequired(message="Choose a new password."), Length(max=1024),
    ])
    confirm = PasswordField("Repeat the new password", validators=[
        DataRequired(message="Repeat the new password."),
        EqualTo("new_password", message="The two new passwords do not match."),
    ])


@bp.route("/account", methods=["GET", "POST"])
@guard()
def account():
    user = principal().user
    form = ChangePasswordForm()
    status = 200
    if form.validate_on_submit():
        try:
            users.change_password(user, form.current_password.data, form.new_password.data)
            db.session.commit()
        except AppError as err:
            attach_error(form, err)
            status = err.status
        else:
            # The new session version ends every other session; keep this one signed in.
            login_sessions.end_all_but(user.id, session.get(login_sessions.SESSION_KEY))
            login_user(user)
            flash("Password changed; other sessions were signed out.", "success")
            return redirect(url_for("web.account"))
    elif form.is_submitted():
        status = 400
    memberships = sorted(user.memberships, key=lambda m: m.tenant.name)
    return render_template("account.html", form=form, user=user,
                           memberships=memberships), status
