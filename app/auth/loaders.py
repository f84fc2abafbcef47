"""Turn a request's credentials into a Principal: session cookie, bearer JWT or API key."""

from __future__ import annotations

from flask import current_app, request, session
from flask_login import current_user

from app.auth.pepper import api_key_pepper
from app.auth.principal import Principal
from app.errors import Unauthorized
from app.extensions import db, login_manager
from app.models import Membership, Tenant, User
from app.security import tokens
from app.services.identity import api_keys as api_key_service
from app.services.identity import login_sessions
from app.services.identity import members as member_service

TENANT_SESSION_KEY = "tenant_id"


@login_manager.user_loader
def load_user(login_id: str) -> User | None:
    """The login id is `<user id>:<session version>`; a stale version logs the user out, and
    so does a session whose sign-in was ended on the server (signed out)."""
    user_id, _, version = login_id.partition(":")
    if not (user_id.isdigit() and version.isdigit()):
        return None
    user = db.session.get(User, int(user_id))
    if user is None or not user.is_active or user.session_version != int(version):
        return None
    if not login_sessions.is_live(user.id, session.get(login_sessions.SESSION_KEY)):
        return None
    return user


def load_web_principal() -> Principal | None:
    if not current_user.is_authenticated:
        return None
    membership = member_service.pick_membership(current_user, session.get(TENANT_SESSION_KEY))
    if membership is None:
        return None
    session[TENANT_SESSION_KEY] = membership.tenant_id
    return Principal(tenant=membership.tenant, user=current_user, role=membership.role)


def load_api_principal() -> Principal | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return _from_bearer(header[7:].strip())
    presented = request.headers.get("X-API-Key")
    if presented:
        key = api_key_service.authenticate_key(presented, pepper=api_key_pepper())
        if key is None:
            raise Unauthorized("The API key is not valid.")
        return Principal(tenant=key.tenant, api_key=key)
    return None


def _from_bearer(token: str) -> Principal:
    try:
        claims = tokens.verify(token, current_app.config["SECRET_KEY"])
    except tokens.InvalidTokenError:
        raise Unauthorized("The bearer token is invalid or expired.") from None
    # One query for the user, the membership and the workspace: this runs on every API call.
    row = db.session.execute(
        db.select(User, Membership, Tenant)
        .join(Membership, Membership.user_id == User.id)
        .join(Tenant, Tenant.id == Membership.tenant_id)
        .where(User.id == claims.user_id, Membership.tenant_id == claims.tenant_id)
    ).first()
    user = row[0] if row else db.session.get(User, claims.user_id)
    if user is None or not user.is_active or user.session_version != claims.session_version:
        raise Unauthorized("The bearer token is no longer valid.")
    if row is None:
        raise Unauthorized("You are no longer a member of this workspace.")
    _, membership, tenant = row
    return Principal(tenant=tenant, user=user, role=membership.role)
