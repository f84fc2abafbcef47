"""The accept page of an invitation link: every way in, and every way it is refused."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import Invitation, Membership, Role
from app.models.types import utcnow
from app.services.identity import users
from tests import factories
from tests.sweeps import world
from tests.web._support import post_form, text

NEW_EMAIL = "newcomer@example.test"


@pytest.fixture
def two_tenants(app):
    return world.two_tenants()


def accept_path(token: str) -> str:
    return f"/invite/{token}"


def member_of(email: str, tenant) -> Membership | None:
    db.session.expire_all()
    user = users.find_user(email)
    if user is None:
        return None
    return db.session.scalar(select(Membership).filter_by(user_id=user.id, tenant_id=tenant.id))


def submit(client, token: str, data: dict):
    return post_form(client, accept_path(token), data, token_from=accept_path(token))


def test_a_new_person_chooses_their_own_password_and_joins(app, two_tenants):
    a, _ = two_tenants
    _, token = factories.make_invitation(a.tenant, NEW_EMAIL, Role.contributor)
    client = app.test_client()
    page = client.get(accept_path(token))
    assert page.status_code == 200
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["Cache-Control"] == "no-store"
    assert token not in text(page)  # the forms post back to the address, never repeat it
    response = submit(client, token, {"action": "create", "new_password": "my-own-password",
                                      "confirm": "my-own-password"})
    assert response.status_code == 302 and response.headers["Location"] == "/"
    assert member_of(NEW_EMAIL, a.tenant).role == Role.contributor
    assert users.find_user(NEW_EMAIL).check_password("my-own-password")
    assert "Tenant A" in text(client.get("/"))  # signed in, in the new workspace


def test_a_short_or_mismatched_password_is_refused_next_to_the_field(app, two_tenants):
    a, _ = two_tenants
    _, token = factories.make_invitation(a.tenant, NEW_EMAIL)
    client = app.test_client()
    short = submit(client, token, {"action": "create", "new_password": "short",
                                   "confirm": "short"})
    assert short.status_code == 400 and "Use at least 8 characters." in text(short)
    other = submit(client, token, {"action": "create", "new_password": "long-enough-1",
                                   "confirm": "long-enough-2"})
    assert other.status_code == 400 and "The two passwords do not match." in text(other)
    assert users.find_user(NEW_EMAIL) is None


def test_the_anonymous_page_does_not_tell_whether_the_email_has_an_account(app, two_tenants):
    a, b = two_tenants
    _, known = factories.make_invitation(a.tenant, b.viewer.email)
    _, unknown = factories.make_invitation(a.tenant, NEW_EMAIL)

    def shape(token: str, email: str) -> str:
        body = text(app.test_client().get(accept_path(token)))
        body = re.sub(r'name="csrf_token" type="hidden" value="[^"]+"', "", body)
        body = re.sub(r'content="[^"]+"', "", body)
        body = re.sub(r'"X-CSRFToken": "[^"]+"', "", body)
        body = re.sub(r"<time[^>]*>[^<]*</time>", "", body)
        return body.replace(email, "EMAIL")

    assert shape(known, b.viewer.email) == shape(unknown, NEW_EMAIL)


def test_an_existing_account_signs_in_to_accept(app, two_tenants):
    a, b = two_tenants
    _, token = factories.make_invitation(a.tenant, b.viewer.email, Role.admin)
    client = app.test_client()
    wrong = submit(client, token, {"action": "signin", "password": "not-the-password"})
    assert wrong.status_code == 401 and "Email or password is incorrect." in text(wrong)
    assert member_of(b.viewer.email, a.tenant) is None
    new = submit(client, token, {"action": "create", "new_password": "takeover-pw-1",
                                 "confirm": "takeover-pw-1"})
    assert new.status_code == 409 and "sign in with it to accept" in text(new)
    assert users.find_user(b.viewer.email).check_password(factories.PASSWORD)
    right = submit(client, token, {"action": "signin", "password": factories.PASSWORD})
    assert right.status_code == 302
    assert member_of(b.viewer.email, a.tenant).role == Role.admin


def test_the_signed_in_invitee_joins_with_one_button(two_tenants, login_as):
    a, b = two_tenants
    _, token = factories.make_invitation(a.tenant, b.viewer.email)
    client = login_as(b.viewer, b.tenant)
    page = text(client.get(accept_path(token)))
    assert "Join Tenant A</button>" in page and 'type="password"' not in page
    response = submit(client, token, {"action": "join"})
    assert response.status_code == 302
    assert member_of(b.viewer.email, a.tenant) is not None
    assert "You joined Tenant A as viewer." in text(client.get("/"))


def test_a_signed_in_stranger_is_refused(two_tenants, login_as):
    a, b = two_tenants
    _, token = factories.make_invitation(a.tenant, b.viewer.email)
    client = login_as(b.owner, b.tenant)
    page = text(client.get(accept_path(token)))
    assert f"You are signed in as {b.owner.email}, but this invitation is for" in page
    response = submit(client, token, {"action": "join"})
    assert response.status_code == 403 and "for another email address" in text(response)
    assert member_of(b.owner.email, a.tenant) is None
    assert member_of(b.viewer.email, a.tenant) is None


@pytest.mark.parametrize("how, status, words", [
    ("used", 410, "already used"), ("revoked", 410, "was revoked"),
    ("expired", 410, "has expired"), ("unknown", 404, "not valid"),
])
def test_unusable_links_get_a_clear_page(app, two_tenants, how, status, words):
    a, b = two_tenants
    invitation, token = factories.make_invitation(a.tenant, b.viewer.email)
    if how == "used":
        submit(app.test_client(), token, {"action": "signin", "password": factories.PASSWORD})
    elif how == "revoked":
        invitation.status, invitation.revoked_at = "revoked", utcnow()
    elif how == "expired":
        invitation.expires_at = utcnow() - timedelta(minutes=1)
    elif how == "unknown":
        token = "A" * 43
    db.session.commit()
    for response in (app.test_client().get(accept_path(token)),
                     submit(app.test_client(), token, {"action": "signin",
                                                       "password": factories.PASSWORD})):
        assert response.status_code == status
        assert words in text(response) and "This invitation cannot be used" in text(response)
    assert db.session.scalar(select(Invitation.status)) == (
        "accepted" if how == "used" else "revoked" if how == "revoked" else "pending")


def test_an_account_of_no_workspace_can_still_accept_by_signing_in(app, two_tenants):
    """Someone removed from every workspace cannot use the login form (it needs a
    membership); the accept page signs them in and joins in one step."""
    a, _ = two_tenants
    loner = factories.make_user("loner@example.test")
    _, token = factories.make_invitation(a.tenant, loner.email)
    client = app.test_client()
    response = submit(client, token, {"action": "signin", "password": factories.PASSWORD})
    assert response.status_code == 302
    assert member_of(loner.email, a.tenant) is not None
    assert client.get("/account").status_code == 200
