"""Sign-in for API callers and identity introspection."""

from __future__ import annotations

from datetime import datetime

from flask import current_app
from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body
from app.api.schemas import MembershipRef, TenantRef
from app.auth.guards import ANY_KEY, guard, public
from app.auth.ratelimit import login_limits
from app.models import Role
from app.security import tokens
from app.services.identity import users
from app.tenancy import principal


class LoginIn(Strict):
    email: str = Field(min_length=3, max_length=254)
    password: str = Field(min_length=1, max_length=1024)
    tenant_id: int | None = Field(default=None, ge=1)


class LoginOut(Out):
    token: str
    expires_at: datetime
    tenant_id: int
    role: Role


class UserRef(Out):
    id: int
    email: str


class KeyRef(Out):
    id: int
    name: str
    prefix: str
    full_access: bool
    capabilities: list[str]


class MeOut(Out):
    tenant: TenantRef
    role: Role | None
    user: UserRef | None
    api_key: KeyRef | None
    memberships: list[MembershipRef]


@bp.post("/auth/login")
@login_limits
@public
@doc("Exchange email and password for a short-lived bearer token (failed attempts are "
     "rate limited per IP and per account)", request=LoginIn, response=LoginOut,
     errors=(400, 401, 429))
def login():
    body = parse_body(LoginIn)
    membership = users.authenticate(body.email, body.password, body.tenant_id)
    claims = tokens.TokenClaims(membership.user_id, membership.tenant_id,
                                membership.user.session_version)
    token, expires_at = tokens.issue(claims, current_app.config["SECRET_KEY"],
                                     current_app.config["JWT_TTL_SECONDS"])
    return ok({"token": token, "expires_at": expires_at.isoformat(),
               "tenant_id": membership.tenant_id, "role": membership.role.value})


@bp.get("/auth/me")
@guard(api_key=ANY_KEY)
@doc("Who the caller is, in which workspace, with which role", response=MeOut)
def me():
    who = principal()
    memberships = who.user.memberships if who.user else []
    data = MeOut(
        tenant=TenantRef.model_validate(who.tenant),
        role=who.role,
        user=UserRef.model_validate(who.user) if who.user else None,
        api_key=KeyRef.model_validate(who.api_key) if who.api_key else None,
        memberships=[
            MembershipRef(tenant_id=m.tenant_id, tenant_name=m.tenant.name, role=m.role)
            for m in sorted(memberships, key=lambda m: m.tenant_id)
        ],
    )
    return ok(data.model_dump(mode="json"))
