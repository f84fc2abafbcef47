"""The members page: add, change role, remove, through the forms, with their error cases."""

from __future__ import annotations

from app.extensions import db
from app.models import Membership, Role
from app.services import users
from tests.web._support import post_form, text


def role_of(membership_id: int) -> Role | None:
    db.session.expire_all()
    membership = db.session.get(Membership, membership_id)
    return membership.role if membership else None


def test_members_page_lists_members_with_role_badges(two_tenants, login_as):
    a, b = two_tenants
    page = text(login_as(a.admin, a.tenant).get("/members"))
    for user in a.by_role.values():
        assert user.email in page
    for role in Role:
        assert f"badge-{role.value}" in page
    assert b.admin.email not in page
    assert "Only for a new user." in page


def test_htmx_get_returns_the_table_fragment(two_tenants, login_as):
    a, _ = two_tenants
    response = login_as(a.admin, a.tenant).get("/members", headers={"HX-Request": "true"})
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="members-table"') and "<html" not in body


def test_add_a_new_user_by_form_post(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members", {"email": "New@A.test", "role": "contributor",
                                              "password": "long-enough-pw"})
    assert response.status_code == 302 and response.headers["Location"] == "/members"
    page = text(client.get("/members"))
    assert "new@a.test" in page and "Added new@a.test as contributor." in page
    user = users.find_user("new@a.test")
    assert user is not None and user.check_password("long-enough-pw")


def test_add_an_existing_user_by_htmx_needs_no_password(two_tenants, login_as):
    a, b = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members", {"email": b.viewer.email, "role": "viewer"},
                         htmx=True)
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="members-panel"')
    assert b.viewer.email in body
    assert 'hx-swap-oob="beforeend:#flashes"' in body and "Added viewer@tenant-b.test" in body


def test_adding_a_duplicate_member_shows_an_error(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members", {"email": a.viewer.email, "role": "admin"},
                         htmx=True)
    assert response.status_code == 409
    assert "is already a member of this workspace" in text(response)
    assert 'class="form-alert"' in text(response)
    assert a.membership(a.viewer).role == Role.viewer


def test_a_bad_email_is_shown_next_to_the_field(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members", {"email": "not-an-email", "role": "viewer",
                                              "password": "long-enough-pw"})
    body = text(response)
    assert response.status_code == 400
    assert '<p class="field-error" id="email-error">Enter an email address.</p>' in body
    assert users.find_user("not-an-email") is None


def test_a_new_user_without_password_is_asked_for_one(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/members",
                         {"email": "nobody@a.test", "role": "viewer"}, htmx=True)
    assert response.status_code == 400
    assert 'id="password-error">No user has this email yet' in text(response)


def test_a_short_initial_password_is_refused_next_to_the_field(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/members",
                         {"email": "short@a.test", "role": "viewer", "password": "short"})
    assert response.status_code == 400
    assert 'id="password-error">Use at least 8 characters.' in text(response)
    assert users.find_user("short@a.test") is None


def test_an_admin_cannot_make_an_owner(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    assert '<option value="owner"' not in text(client.get("/members"))
    response = post_form(client, "/members", {"email": "boss@a.test", "role": "owner",
                                              "password": "long-enough-pw"})
    assert response.status_code == 400
    assert users.find_user("boss@a.test") is None


def test_change_a_role_with_htmx(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.viewer)
    response = post_form(login_as(a.admin, a.tenant), f"/members/{membership.id}/role",
                         {"role": "contributor"}, htmx=True)
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="members-table"')
    assert f"{a.viewer.email} is now contributor." in body
    assert role_of(membership.id) == Role.contributor


def test_change_a_role_by_plain_form_redirects(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.contributor)
    response = post_form(login_as(a.admin, a.tenant), f"/members/{membership.id}/role",
                         {"role": "admin"})
    assert response.status_code == 302
    assert role_of(membership.id) == Role.admin


def test_demoting_the_last_owner_shows_the_error_and_changes_nothing(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.owner)
    response = post_form(login_as(a.owner, a.tenant), f"/members/{membership.id}/role",
                         {"role": "admin"}, htmx=True)
    body = text(response)
    assert response.status_code == 409
    assert "Cannot demote the last owner" in body
    assert 'class="flash flash-error"' in body
    assert body.lstrip().startswith('<section id="members-table"')  # the table as it really is
    assert role_of(membership.id) == Role.owner


def test_an_admin_cannot_change_an_owner(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.owner)
    client = login_as(a.admin, a.tenant)
    assert "Owner only" in text(client.get("/members"))
    response = post_form(client, f"/members/{membership.id}/role", {"role": "viewer"},
                         htmx=True)
    assert response.status_code == 403
    assert "Only an owner can" in text(response)
    assert role_of(membership.id) == Role.owner


def test_an_unknown_role_is_refused(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.viewer)
    response = post_form(login_as(a.admin, a.tenant), f"/members/{membership.id}/role",
                         {"role": "superuser"}, htmx=True)
    assert response.status_code == 400
    assert role_of(membership.id) == Role.viewer


def test_an_owner_can_hand_over_ownership_then_step_down(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.owner, a.tenant)
    admin_row, owner_row = a.membership(a.admin), a.membership(a.owner)
    assert post_form(client, f"/members/{admin_row.id}/role", {"role": "owner"},
                     htmx=True).status_code == 200
    response = post_form(client, f"/members/{owner_row.id}/role", {"role": "viewer"},
                         htmx=True)
    # Stepping below admin leaves the members page for the dashboard.
    assert response.status_code == 204 and response.headers["HX-Redirect"] == "/"
    assert role_of(owner_row.id) == Role.viewer
    assert client.get("/members").status_code == 403


def test_remove_a_member_with_htmx(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    assert 'hx-confirm="Remove ' in text(client.get("/members"))
    membership = a.membership(a.contributor)
    response = post_form(client, f"/members/{membership.id}/remove", htmx=True)
    assert response.status_code == 200
    assert f"Removed {a.contributor.email}" in text(response)
    assert role_of(membership.id) is None


def test_removing_the_last_owner_is_refused(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.owner)
    response = post_form(login_as(a.owner, a.tenant), f"/members/{membership.id}/remove",
                         htmx=True)
    assert response.status_code == 409
    assert "Cannot remove the last owner" in text(response)
    assert role_of(membership.id) == Role.owner


def test_another_tenants_membership_is_404(two_tenants, login_as):
    a, b = two_tenants
    foreign = b.membership(b.viewer)
    client = login_as(a.owner, a.tenant)
    assert post_form(client, f"/members/{foreign.id}/role", {"role": "admin"}).status_code == 404
    assert post_form(client, f"/members/{foreign.id}/remove").status_code == 404
    assert role_of(foreign.id) == Role.viewer


def test_viewer_cannot_mutate_members(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    target = a.membership(a.contributor)
    assert post_form(client, "/members", {"email": "x@a.test", "role": "viewer",
                                          "password": "long-enough-pw"}).status_code == 403
    assert post_form(client, f"/members/{target.id}/remove").status_code == 403
    assert role_of(target.id) == Role.contributor

