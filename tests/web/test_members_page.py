"""Issue 15 item 5: the members page offers only what the server accepts, asks before a
role change (naming what changes), searches and pages, and shows invitations' status."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import event, select

from app.extensions import db
from app.models import Invitation, Membership, Role, User
from app.models.invitation import InvitationStatus
from app.models.types import utcnow
from app.services.identity import users
from tests import factories
from tests.conftest import csrf_token
from tests.web._support import post_form, text

ROW = re.compile(r'<tr id="member-(\d+)"[^>]*>(.*?)</tr>', re.S)


@contextmanager
def statements() -> Iterator[list[str]]:
    """The SQL statements the app sends meanwhile (every connection of the engine)."""
    seen: list[str] = []

    def count(_conn, _cursor, statement, *_args) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


def offers(client) -> dict[int, tuple[set[str], bool]]:
    """{membership id: (roles offered, remove offered)} as the page shows them."""
    page = text(client.get("/members"))
    return {int(mid): (set(re.findall(r'<option value="(\w+)">Make', row)), "/remove\"" in row)
            for mid, row in ROW.findall(page)}


def restore(tenant_id: int, user_id: int, role: Role) -> None:
    """Put a membership back as it was before a probe changed or removed it."""
    db.session.expire_all()
    row = db.session.scalar(select(Membership).filter_by(tenant_id=tenant_id, user_id=user_id))
    if row is None:
        db.session.add(Membership(tenant_id=tenant_id, user_id=user_id, role=role))
    else:
        row.role = role
    db.session.commit()


@pytest.mark.parametrize("actor", [Role.owner, Role.admin])
@pytest.mark.parametrize("owners", [1, 2])
def test_every_row_offers_exactly_what_the_server_accepts(two_tenants, login_as, actor, owners):
    """For each row and each role (and removal), the page offers it iff the server says yes."""
    a, _ = two_tenants
    if owners == 2:
        factories.make_user("second-owner@a.test", a.tenant, Role.owner)
    client = login_as(a.by_role[actor], a.tenant)
    before = {m.id: (m.user_id, m.role) for m in
              db.session.scalars(select(Membership).filter_by(tenant_id=a.tenant.id))}
    shown = offers(client)
    assert set(shown) == set(before)
    mismatches = []
    for membership_id, (user_id, role) in before.items():
        offered, removable = shown[membership_id]
        for target in Role:
            if target == role:
                continue
            response = post_form(client, f"/members/{membership_id}/role",
                                 {"role": target.value}, htmx=True, token_from="/account")
            if (response.status_code < 400) != (target.value in offered):
                mismatches.append(f"{role.value} -> {target.value}: offered="
                                  f"{target.value in offered}, server={response.status_code}")
            restore(a.tenant.id, user_id, role)
        response = post_form(client, f"/members/{membership_id}/remove", htmx=True,
                             token_from="/account")
        if (response.status_code < 400) != removable:
            mismatches.append(f"remove {role.value}: offered={removable}, "
                              f"server={response.status_code}")
        restore(a.tenant.id, user_id, role)
        shown = offers(client)  # a removal and restore gives the row a new id
        shown[membership_id] = shown.get(membership_id, (offered, removable))
    assert not mismatches, "\n".join(mismatches)


def test_the_only_owner_is_offered_no_demotion_and_no_removal(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.owner, a.tenant)
    offered, removable = offers(client)[a.membership(a.owner).id]
    assert offered == set() and not removable
    assert "Only owner" in text(client.get("/members"))


def test_members_below_admin_cannot_see_the_page_or_the_confirm_step(two_tenants, login_as):
    a, _ = two_tenants
    target = a.membership(a.viewer).id
    for role in (Role.viewer, Role.contributor):
        client = login_as(a.by_role[role], a.tenant)
        assert client.get("/members").status_code == 403
        assert client.get(f"/members/{target}/row?role=admin").status_code == 403
        assert post_form(client, f"/members/{target}/role", {"role": "admin"}).status_code == 403


def test_choosing_a_role_asks_first_and_names_what_is_gained(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.viewer)
    client = login_as(a.admin, a.tenant)
    response = client.get(f"/members/{membership.id}/row?role=admin",
                          headers={"HX-Request": "true"})
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith(f'<tr id="member-{membership.id}"')
    assert f"Make {a.viewer.email} an admin?" in body
    assert "will also be able to" in body and "invite, re-role and remove members" in body
    assert 'name="role" value="admin"' in body and ">Make admin</button>" in body
    assert "Cancel" in body
    db.session.expire_all()
    assert db.session.get(Membership, membership.id).role == Role.viewer  # asking changes nothing


def test_a_demotion_names_what_is_lost(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.admin)
    body = text(login_as(a.owner, a.tenant).get(f"/members/{membership.id}/row?role=viewer",
                                                  headers={"HX-Request": "true"}))
    assert f"Make {a.admin.email} a viewer?" in body
    assert "will no longer be able to" in body and "manage API keys" in body


def test_contributor_to_viewer_says_only_the_label_changes(two_tenants, login_as):
    a, _ = two_tenants
    path = f"/members/{a.membership(a.contributor).id}/row?role=viewer"
    body = text(login_as(a.admin, a.tenant).get(path, headers={"HX-Request": "true"}))
    assert "only the label changes" in body


def test_a_role_the_row_does_not_offer_gets_no_confirm_step(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    for target, role in ((a.viewer, "owner"), (a.owner, "viewer"), (a.viewer, "superuser")):
        body = text(client.get(f"/members/{a.membership(target).id}/row?role={role}",
                               headers={"HX-Request": "true"}))
        assert "role-confirm" not in body and f"member-{a.membership(target).id}" in body


def test_without_javascript_the_confirm_step_is_a_whole_page(two_tenants, login_as):
    a, _ = two_tenants
    membership = a.membership(a.contributor)
    body = text(login_as(a.admin, a.tenant).get(f"/members/{membership.id}/row?role=admin"))
    assert "<html" in body and f"Make {a.contributor.email} an admin?" in body
    # The row's form works without htmx: Next lands here, and Confirm is a plain post.
    assert f'method="post" action="/members/{membership.id}/role"' in body


def add_members(tenant, count: int) -> None:
    """Many members quickly: rows, not scrypt hashes (nobody signs in as them)."""
    for n in range(count):
        user = User(email=f"member-{n:03d}@crowd.test", password_hash="unusable")
        db.session.add(user)
        db.session.flush()
        db.session.add(Membership(tenant_id=tenant.id, user_id=user.id, role=Role.viewer))
    db.session.commit()


def emails(body: str) -> list[str]:
    return re.findall(r'<span class="person-name">([^<]+)</span>', body)


def test_120_members_are_paged_50_at_a_time(two_tenants, login_as):
    a, _ = two_tenants
    add_members(a.tenant, 120)
    client = login_as(a.admin, a.tenant)
    first = text(client.get("/members"))
    assert len(emails(first.split('id="members-table"', 1)[1])) == 50
    assert "1–50 of 124" in first and 'rel="next"' in first
    last = text(client.get("/members?page=3", headers={"HX-Request": "true"}))
    assert last.lstrip().startswith('<section id="members-table"')
    assert len(emails(last)) == 24 and "101–124 of 124" in last
    assert "101–124 of 124" in text(client.get("/members?page=999"))  # clamped to the last
    assert "1–50 of 124" in text(client.get("/members?page=-2"))
    seen = set()
    for page in (1, 2, 3):
        seen |= set(emails(text(client.get(f"/members?page={page}",
                                           headers={"HX-Request": "true"}))))
    assert len(seen) == 124


def test_search_by_email_part_with_wildcards_taken_literally(two_tenants, login_as):
    a, b = two_tenants
    add_members(a.tenant, 120)
    client = login_as(a.admin, a.tenant)
    found = emails(text(client.get("/members?q=MEMBER-07", headers={"HX-Request": "true"})))
    assert found == [f"member-07{n}@crowd.test" for n in range(10)]
    assert emails(text(client.get("/members?q=%25", headers={"HX-Request": "true"}))) == []
    assert emails(text(client.get("/members?q=member_0", headers={"HX-Request": "true"}))) == []
    nobody = text(client.get(f"/members?q={b.viewer.email}", headers={"HX-Request": "true"}))
    assert emails(nobody) == [] and "No member matches" in nobody  # another workspace's
    assert len(text(client.get("/members?q=" + "x" * 5000)).encode()) < 200_000


def test_the_page_costs_the_same_statements_for_4_or_124_members(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    client.get("/members")
    with statements() as small:
        client.get("/members")
    add_members(a.tenant, 120)
    with statements() as large:
        assert client.get("/members").status_code == 200
    assert len(large) == len(small), "\n".join(large)


def test_a_role_change_keeps_the_search_and_page(two_tenants, login_as):
    a, _ = two_tenants
    add_members(a.tenant, 120)
    client = login_as(a.admin, a.tenant)
    target = db.session.scalar(select(Membership).join(User).where(
        User.email == "member-110@crowd.test"))
    headers = {"HX-Request": "true", "HX-Current-URL": "http://localhost/members?page=3",
               "X-CSRFToken": factories_token(client)}
    body = text(client.post(f"/members/{target.id}/role", data={"role": "admin"},
                            headers=headers))
    assert "member-110@crowd.test is now admin." in body and "101–124 of 124" in body


def factories_token(client) -> str:
    return csrf_token(client, "/account")


def test_invitations_show_their_status(two_tenants, login_as):
    a, _ = two_tenants
    factories.make_invitation(a.tenant, "pending@a.test")
    revoked, _ = factories.make_invitation(a.tenant, "revoked@a.test")
    revoked.status, revoked.revoked_at = InvitationStatus.revoked, utcnow()
    expired, _ = factories.make_invitation(a.tenant, "expired@a.test")
    expired.expires_at = utcnow() - timedelta(hours=1)
    db.session.commit()
    body = text(login_as(a.admin, a.tenant).get("/members"))
    section = body.split('id="invitations-table"', 1)[1].split("</section>", 1)[0]
    for email, status in (("pending@a.test", "Pending"), ("revoked@a.test", "Revoked"),
                          ("expired@a.test", "Expired")):
        row = section.split(email, 1)[1].split("</tr>", 1)[0]
        assert f">{status}</span>" in row
    assert db.session.scalar(select(Invitation).filter_by(email="pending@a.test"))
    assert users.find_user("pending@a.test") is None


def test_a_search_for_markup_is_shown_as_text(two_tenants, login_as):
    a, _ = two_tenants
    probe = '"><script>alert(1)</script>'
    body = text(login_as(a.admin, a.tenant).get("/members", query_string={"q": probe}))
    assert "<script>alert(1)" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body  # in the box and the empty note
