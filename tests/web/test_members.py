"""The members page: invite, change role, remove, through the forms, with their error cases."""

from __future__ import annotations

import re

from sqlalchemy import select

from app.extensions import db
from app.models import Invitation, Membership, Role
from app.services.identity import users
from tests.web._support import post_form, text

LINK = re.compile(r"http://localhost/invite/([A-Za-z0-9_-]{40,})")


def member_of(user, tenant) -> bool:
    db.session.expire_all()
    return db.session.scalar(select(Membership).filter_by(user_id=user.id,
                                                          tenant_id=tenant.id)) is not None


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
    assert "Create invitation" in page


def test_htmx_get_returns_the_table_fragment(two_tenants, login_as):
    a, _ = two_tenants
    response = login_as(a.admin, a.tenant).get("/members", headers={"HX-Request": "true"})
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="members-table"') and "<html" not in body


def test_invite_by_form_post_shows_the_link_once(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members/invitations",
                         {"email": "New@A.test", "role": "viewer"})
    body = text(response)
    assert response.status_code == 201 and response.headers["Cache-Control"] == "no-store"
    match = LINK.search(body)
    assert match, "the accept link is shown once on the page"
    assert "It will not be shown again." in body and 'data-copy="#new-invite-link"' in body
    assert users.find_user("new@a.test") is None  # an invitation creates no account
    again = text(client.get("/members"))
    assert match.group(0) not in again and match.group(1) not in again
    assert "new@a.test" in again and "Pending" in again


def test_invite_by_htmx_returns_the_panel(two_tenants, login_as):
    a, b = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members/invitations",
                         {"email": b.viewer.email, "role": "viewer"}, htmx=True)
    body = text(response)
    assert response.status_code == 201
    assert body.lstrip().startswith('<div id="members-panel"') and LINK.search(body)
    assert not member_of(b.viewer, a.tenant)


def test_the_invite_page_is_the_same_for_known_and_unknown_emails(two_tenants, login_as):
    a, b = two_tenants
    client = login_as(a.admin, a.tenant)
    known = text(post_form(client, "/members/invitations",
                           {"email": b.viewer.email, "role": "viewer"}, htmx=True))
    unknown = text(post_form(client, "/members/invitations",
                             {"email": "zzz-unknown@b.test", "role": "viewer"}, htmx=True))

    def shape(body: str) -> str:
        body = LINK.sub("LINK", body)
        # The CSRF token is signed with the second it was made in: two requests that straddle
        # a second differ there, whatever the email.
        body = re.sub(r'(name="csrf_token"[^>]*value=")[^"]+', r"\1TOKEN", body)
        body = re.sub(r'(invitation-|invitation_id=|/invitations/)\d+', r"\1N", body)
        body = re.sub(r'<tr id="invitation-N".*?</tr>', "", body, flags=re.S)
        body = body.replace(b.viewer.email, "EMAIL").replace("zzz-unknown@b.test", "EMAIL")
        return re.sub(r"\s+", " ", body)

    assert shape(known).replace("Invitations <span class=\"count\">1", "X") == \
        shape(unknown).replace("Invitations <span class=\"count\">2", "X")


def test_inviting_a_member_again_shows_an_error(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members/invitations",
                         {"email": a.viewer.email, "role": "admin"}, htmx=True)
    assert response.status_code == 409
    assert "is already a member of this workspace" in text(response)
    assert 'class="form-alert"' in text(response)
    assert a.membership(a.viewer).role == Role.viewer


def test_a_bad_email_is_shown_next_to_the_field(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/members/invitations", {"email": "not-an-email",
                                                          "role": "viewer"})
    body = text(response)
    assert response.status_code == 400
    assert '<p class="field-error" id="email-error">Enter an email address.</p>' in body
    assert db.session.scalar(select(Invitation)) is None


def test_there_is_no_password_field_and_no_add_route(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    page = text(client.get("/members"))
    assert 'type="password"' not in page and "Initial password" not in page
    response = post_form(client, "/members", {"email": "x@a.test", "role": "viewer",
                                              "password": "long-enough-pw"})
    assert response.status_code == 405
    assert users.find_user("x@a.test") is None


def test_an_admin_cannot_invite_an_owner(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    assert '<option value="owner"' not in text(client.get("/members"))
    response = post_form(client, "/members/invitations", {"email": "boss@a.test",
                                                          "role": "owner"})
    assert response.status_code == 400
    assert db.session.scalar(select(Invitation)) is None


def test_revoke_an_invitation_with_htmx(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    post_form(client, "/members/invitations", {"email": "gone@a.test", "role": "viewer"})
    invitation = db.session.scalar(select(Invitation))
    response = post_form(client, f"/members/invitations/{invitation.id}/revoke", htmx=True,
                         token_from="/members")
    assert response.status_code == 200
    assert "Revoked the invitation of gone@a.test" in text(response)
    assert "Revoked</span>" in text(response)
    again = post_form(client, f"/members/invitations/{invitation.id}/revoke", htmx=True,
                      token_from="/members")
    assert again.status_code == 409


def test_change_a_role_with_htmx(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.viewer)
    response = post_form(login_as(a.admin, a.tenant), f"/members/{membership.id}/role",
                         {"role": "admin"}, htmx=True)
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="members-table"')
    assert f"{a.viewer.email} is now admin." in body
    assert role_of(membership.id) == Role.admin


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
    assert post_form(client, "/members/invitations", {"email": "x@a.test",
                                                      "role": "viewer"}).status_code == 403
    assert post_form(client, f"/members/{target.id}/remove").status_code == 403
    assert role_of(target.id) == Role.contributor

