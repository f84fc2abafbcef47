"""Changing your password ends every other session but keeps this one signed in."""

from __future__ import annotations

from urllib.parse import urlsplit

from app.extensions import db
from app.models import User
from tests import factories
from tests.web._support import post_form, text

NEW = "a-brand-new-password"


def change(client, current=factories.PASSWORD, new=NEW, confirm=NEW):
    return post_form(client, "/account", {"current_password": current, "new_password": new,
                                          "confirm": confirm}, token_from="/account")


def test_account_page_shows_email_and_workspaces(two_tenants, login_as):
    a, b = two_tenants
    factories.make_user(a.viewer.email, b.tenant, "admin")
    page = text(login_as(a.viewer, a.tenant).get("/account"))
    assert a.viewer.email in page and "Tenant A" in page and "Tenant B" in page
    assert "Change password" in page


def test_password_change_ends_other_sessions_and_keeps_this_one(two_tenants, login_as):
    a, _ = two_tenants
    this_browser = login_as(a.contributor, a.tenant)
    other_browser = login_as(a.contributor, a.tenant)
    assert other_browser.get("/").status_code == 200
    response = change(this_browser)
    assert response.status_code == 302 and response.headers["Location"] == "/account"
    page = this_browser.get("/account")
    assert page.status_code == 200
    assert "Password changed; other sessions were signed out." in text(page)
    stale = other_browser.get("/")
    assert stale.status_code == 302 and urlsplit(stale.headers["Location"]).path == "/login"
    db.session.expire_all()
    assert db.session.get(User, a.contributor.id).check_password(NEW)


def test_a_wrong_current_password_is_shown_next_to_the_field(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    response = change(client, current="not-my-password")
    assert response.status_code == 400
    assert 'id="current_password-error">The current password is incorrect.' in text(response)
    assert client.get("/").status_code == 200  # nothing changed, still signed in


def test_a_short_new_password_is_refused(two_tenants, login_as):
    a, _ = two_tenants
    response = change(login_as(a.viewer, a.tenant), new="short", confirm="short")
    assert response.status_code == 400
    assert 'id="new_password-error">Use at least 8 characters.' in text(response)


def test_the_confirmation_must_match(two_tenants, login_as):
    a, _ = two_tenants
    response = change(login_as(a.viewer, a.tenant), confirm="something-else")
    assert response.status_code == 400
    assert "The two new passwords do not match." in text(response)
    db.session.expire_all()
    assert db.session.get(User, a.viewer.id).check_password(factories.PASSWORD)
