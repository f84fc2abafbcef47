"""Users, tenants and sign-in."""

from __future__ import annotations

from flask import current_app
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from werkzeug.security import check_password_hash, generate_password_hash

from app.errors import Conflict, Unauthorized, ValidationFailed
from app.extensions import db
from app.models import Membership, Role, Tenant, User

MIN_PASSWORD = 8
_DUMMY_HASHES: dict[str, str] = {}


def hash_method() -> str:
    """scrypt in production; tests configure a cheap method to keep fixtures fast."""
    return current_app.config.get("PASSWORD_HASH_METHOD", "scrypt")


def set_password(user: User, password: str) -> None:
    user.set_password(password, method=hash_method())


def _spend_a_hash(password: str) -> None:
    """Check against a real hash so an unknown email costs as much as a wrong password."""
    method = hash_method()
    if method not in _DUMMY_HASHES:
        _DUMMY_HASHES[method] = generate_password_hash("not-a-password", method=method)
    check_password_hash(_DUMMY_HASHES[method], password)


def normalise_email(email: str) -> str:
    return email.strip().lower()


def check_password_policy(password: str, field: str = "password") -> None:
    if len(password) < MIN_PASSWORD:
        raise ValidationFailed.one(field, f"Use at least {MIN_PASSWORD} characters.")


def create_tenant(name: str) -> Tenant:
    name = name.strip()
    if not name:
        raise ValidationFailed.one("name", "A workspace needs a name.")
    if "\x00" in name:
        raise ValidationFailed.one("name", "Remove the NUL character.")
    if db.session.scalar(select(Tenant).where(Tenant.name == name)):
        raise Conflict(f"A workspace named {name!r} already exists.")
    tenant = Tenant(name=name)
    db.session.add(tenant)
    _flush_or_conflict(f"A workspace named {name!r} already exists.")
    return tenant


def create_user(email: str, password: str) -> User:
    email = normalise_email(email)
    if "@" not in email or "\x00" in email:
        raise ValidationFailed.one("email", "Enter an email address.")
    check_password_policy(password)
    if find_user(email):
        raise Conflict(f"A user with email {email} already exists.")
    user = User(email=email, session_version=1)
    set_password(user, password)
    db.session.add(user)
    _flush_or_conflict(f"A user with email {email} already exists.")
    return user


def find_user(email: str) -> User | None:
    email = normalise_email(email)
    if "\x00" in email:  # no stored email holds NUL, and PostgreSQL would refuse the query
        return None
    return db.session.scalar(select(User).where(User.email == email))


def find_tenant(name: str) -> Tenant | None:
    if "\x00" in name:
        return None
    return db.session.scalar(select(Tenant).where(Tenant.name == name))


def authenticate(email: str, password: str, tenant_id: int | None = None) -> Membership:
    """The membership a correct sign-in lands in; one vague error for every failure."""
    user = verify_password(email, password)
    if user is None:
        raise Unauthorized("Email or password is incorrect.")
    memberships = sorted(user.memberships, key=lambda m: m.tenant_id)
    if tenant_id is not None:
        memberships = [m for m in memberships if m.tenant_id == tenant_id]
    if not memberships:
        raise Unauthorized("You are not a member of that workspace.")
    return memberships[0]


def verify_password(email: str, password: str) -> User | None:
    """The active user with this email and password, else None (at the same cost)."""
    user = find_user(email)
    if user is None:
        _spend_a_hash(password)
        return None
    if not user.check_password(password) or not user.is_active:
        return None
    return user


def change_password(user: User, current: str, new: str) -> None:
    if not user.check_password(current):
        raise ValidationFailed.one("current_password", "The current password is incorrect.")
    check_password_policy(new, "new_password")
    set_password(user, new)


def grant(tenant: Tenant, user: User, role: Role) -> Membership:
    membership = Membership(tenant=tenant, user=user, role=role)
    db.session.add(membership)
    _flush_or_conflict(f"{user.email} is already a member of {tenant.name}.")
    return membership


def _flush_or_conflict(message: str) -> None:
    try:
        db.session.flush()
    except IntegrityError:
        db.session.rollback()
        raise Conflict(message) from None
