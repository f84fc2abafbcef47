"""Invitations (issue 9 item 1): a workspace admin adds people by a single-use link that the
invitee accepts; no admin sets or learns anyone's password, and the invite answer never
tells whether an email has an account."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text

from app.extensions import db
from app.models import AuditEvent, Invitation, Membership, User
from app.models.types import utcnow
from tests.sweeps import world
from tests.sweeps.routes import describe_change, fingerprint

INVITES = "/api/v1/invitations"
VICTIM = "victim@elsewhere.test"


@pytest.fixture
def two_tenants(app):
    return world.two_tenants()


def code(response) -> str:
    return response.get_json()["error"]["code"]


def token_of(accept_url: str) -> str:
    return accept_url.rstrip("/").rsplit("/", 1)[-1]


def invite(api, email: str, role: str = "viewer"):
    response = api.post(INVITES, json={"email": email, "role": role})
    assert response.status_code == 201, response.get_json()
    return response.get_json()["data"]


def user_count() -> int:
    return db.session.scalar(select(func.count()).select_from(User)) or 0


def member_of(user_email: str, tenant) -> bool:
    db.session.expire_all()
    user = db.session.scalar(select(User).where(User.email == user_email))
    return user is not None and any(m.tenant_id == tenant.id for m in user.memberships)


# -- the takeover story of the issue ----------------------------------------------------

def test_an_admin_can_no_longer_create_an_account_with_a_password(two_tenants, bearer, client):
    """Before: A's admin added VICTIM with a password of their choosing, B later added the
    same email, and A's admin signed in as VICTIM inside B. Every step is now refused."""
    a, b = two_tenants
    admin_a = bearer(a.admin, a.tenant)
    old_path = admin_a.post("/api/v1/members", json={"email": VICTIM, "role": "viewer",
                                                     "password": "admin-chosen-pw"})
    assert old_path.status_code in (404, 405)
    with_password = admin_a.post(INVITES, json={"email": VICTIM, "role": "viewer",
                                                "password": "admin-chosen-pw"})
    assert with_password.status_code == 400 and code(with_password) == "validation_failed"
    users_before = user_count()
    invite(admin_a, VICTIM)
    assert user_count() == users_before, "an invitation must not create an account"
    login = client.post("/api/v1/auth/login", json={"email": VICTIM,
                                                    "password": "admin-chosen-pw"})
    assert login.status_code == 401


def test_an_existing_account_joins_only_by_accepting(two_tenants, bearer):
    a, b = two_tenants
    admin_a = bearer(a.admin, a.tenant)
    invite(admin_a, b.viewer.email, "admin")
    assert not member_of(b.viewer.email, a.tenant)
    listed = admin_a.get("/api/v1/members").get_json()["data"]
    assert b.viewer.email not in {m["email"] for m in listed}


def test_an_accepted_invitation_joins_with_its_role_and_is_audited(two_tenants, bearer):
    a, b = two_tenants
    data = invite(bearer(a.admin, a.tenant), b.viewer.email, "contributor")
    response = bearer(b.viewer, b.tenant).post(f"{INVITES}/accept",
                                               json={"token": token_of(data["accept_url"])})
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["data"] == {"tenant_id": a.tenant.id, "tenant_name": "Tenant A",
                                           "role": "contributor"}
    membership = db.session.scalar(select(Membership).filter_by(tenant_id=a.tenant.id,
                                                                user_id=b.viewer.id))
    assert membership is not None and membership.role.value == "contributor"
    actions = list(db.session.scalars(select(AuditEvent.action).where(
        AuditEvent.tenant_id == a.tenant.id).order_by(AuditEvent.id)))
    assert actions[-2:] == ["invitation.created", "invitation.accepted"]
    listed = bearer(a.admin, a.tenant).get(INVITES).get_json()["data"]
    assert [(i["email"], i["status"]) for i in listed] == [(b.viewer.email, "accepted")]


# -- identical answers -------------------------------------------------------------------

def _shape(data: dict) -> dict:
    """The answer with what necessarily differs per request (id, email, token, times) blanked."""
    volatile = {"id", "email", "accept_url", "created_at", "expires_at"}
    return {k: ("*" if k in volatile else v) for k, v in data.items()}


def test_the_invite_answer_is_the_same_for_known_and_unknown_emails(two_tenants, bearer):
    a, b = two_tenants
    admin_a = bearer(a.admin, a.tenant)
    known = admin_a.post(INVITES, json={"email": b.owner.email, "role": "viewer"})
    unknown = admin_a.post(INVITES, json={"email": "nobody-yet@example.test", "role": "viewer"})
    assert known.status_code == unknown.status_code == 201
    assert set(known.headers.keys()) == set(unknown.headers.keys())
    assert _shape(known.get_json()["data"]) == _shape(unknown.get_json()["data"])
    listed = {i["email"]: _shape(i) for i in admin_a.get(INVITES).get_json()["data"]}
    assert listed[b.owner.email] == listed["nobody-yet@example.test"]
    audits = list(db.session.scalars(select(AuditEvent).where(
        AuditEvent.action == "invitation.created").order_by(AuditEvent.id)))
    assert [sorted(e.data) for e in audits] == [["email", "role"], ["email", "role"]]
    assert "user_id" not in known.get_json()["data"]


def test_inviting_a_current_member_says_so_and_writes_nothing(two_tenants, bearer):
    """What the admin can already see in the member list may be said; nothing more."""
    a, _ = two_tenants
    before = fingerprint()
    response = bearer(a.admin, a.tenant).post(INVITES, json={"email": a.viewer.email.upper(),
                                                             "role": "viewer"})
    assert response.status_code == 409 and code(response) == "conflict"
    assert not describe_change(before, fingerprint())


def test_an_admin_cannot_invite_an_owner_and_a_viewer_cannot_invite(two_tenants, bearer):
    a, _ = two_tenants
    before = fingerprint()
    as_admin = bearer(a.admin, a.tenant).post(INVITES, json={"email": VICTIM, "role": "owner"})
    as_viewer = bearer(a.viewer, a.tenant).post(INVITES, json={"email": VICTIM, "role": "viewer"})
    assert as_admin.status_code == 403 and as_viewer.status_code == 403
    assert not describe_change(before, fingerprint())
    assert bearer(a.owner, a.tenant).post(INVITES, json={"email": VICTIM,
                                                         "role": "owner"}).status_code == 201


# -- the token -----------------------------------------------------------------------------

def test_the_token_is_stored_only_as_a_hash_and_shown_once(two_tenants, bearer):
    a, _ = two_tenants
    admin_a = bearer(a.admin, a.tenant)
    data = invite(admin_a, VICTIM)
    token = token_of(data["accept_url"])
    assert len(token) >= 40
    with db.engine.connect() as conn:
        dump = repr([tuple(r) for r in conn.execute(text("SELECT * FROM invitations"))])
        audit = repr([tuple(r) for r in conn.execute(text("SELECT * FROM audit_events"))])
    assert token not in dump and token not in audit
    assert hashlib.sha256(token.encode()).hexdigest() in dump
    for response in (admin_a.get(INVITES), admin_a.get("/api/v1/members")):
        assert token not in response.get_data(as_text=True)
    assert "accept_url" not in admin_a.get(INVITES).get_json()["data"][0]


def test_a_token_is_single_use(two_tenants, bearer):
    a, b = two_tenants
    token = token_of(invite(bearer(a.admin, a.tenant), b.viewer.email)["accept_url"])
    first = bearer(b.viewer, b.tenant).post(f"{INVITES}/accept", json={"token": token})
    assert first.status_code == 200
    again = bearer(b.viewer, b.tenant).post(f"{INVITES}/accept", json={"token": token})
    assert again.status_code == 410 and code(again) == "gone"


def test_an_expired_token_is_refused(two_tenants, bearer):
    a, b = two_tenants
    data = invite(bearer(a.admin, a.tenant), b.viewer.email)
    row = db.session.get(Invitation, data["id"])
    row.expires_at = utcnow() - timedelta(seconds=1)
    db.session.commit()
    response = bearer(b.viewer, b.tenant).post(f"{INVITES}/accept",
                                               json={"token": token_of(data["accept_url"])})
    assert response.status_code == 410 and "expired" in response.get_json()["error"]["message"]
    assert not member_of(b.viewer.email, a.tenant)
    listed = bearer(a.admin, a.tenant).get(INVITES).get_json()["data"]
    assert listed[0]["status"] == "expired"


def test_a_revoked_token_is_refused(two_tenants, bearer):
    a, b = two_tenants
    admin_a = bearer(a.admin, a.tenant)
    data = invite(admin_a, b.viewer.email)
    revoked = admin_a.post(f"{INVITES}/{data['id']}/revoke")
    assert revoked.status_code == 200 and revoked.get_json()["data"]["status"] == "revoked"
    response = bearer(b.viewer, b.tenant).post(f"{INVITES}/accept",
                                               json={"token": token_of(data["accept_url"])})
    assert response.status_code == 410 and "revoked" in response.get_json()["error"]["message"]
    assert not member_of(b.viewer.email, a.tenant)
    again = admin_a.post(f"{INVITES}/{data['id']}/revoke")
    assert again.status_code == 409
    assert db.session.scalar(select(AuditEvent.action).order_by(AuditEvent.id.desc())) \
        == "invitation.revoked"


def test_an_unknown_token_is_not_found(two_tenants, bearer):
    a, _ = two_tenants
    response = bearer(a.viewer, a.tenant).post(f"{INVITES}/accept", json={"token": "x" * 43})
    assert response.status_code == 404


def test_accepting_as_the_wrong_signed_in_user_is_refused(two_tenants, bearer):
    a, b = two_tenants
    data = invite(bearer(a.admin, a.tenant), b.viewer.email, "admin")
    before = fingerprint()
    response = bearer(b.owner, b.tenant).post(f"{INVITES}/accept",
                                              json={"token": token_of(data["accept_url"])})
    assert response.status_code == 403 and code(response) == "forbidden"
    assert not describe_change(before, fingerprint())
    assert not member_of(b.owner.email, a.tenant)


def test_api_keys_cannot_accept_or_invite(two_tenants, key_client):
    a, _ = two_tenants
    api = key_client(a.tenant)
    assert api.post(INVITES, json={"email": VICTIM, "role": "viewer"}).status_code == 403
    assert api.post(f"{INVITES}/accept", json={"token": "x" * 43}).status_code == 403


def test_another_workspaces_invitation_is_404(two_tenants, bearer):
    a, b = two_tenants
    data = invite(bearer(b.admin, b.tenant), VICTIM)
    before = fingerprint()
    response = bearer(a.owner, a.tenant).post(f"{INVITES}/{data['id']}/revoke")
    assert response.status_code == 404
    assert not describe_change(before, fingerprint())
    assert VICTIM not in bearer(a.owner, a.tenant).get(INVITES).get_data(as_text=True)


def test_a_second_pending_invitation_for_the_same_email_is_a_conflict(two_tenants, bearer):
    a, _ = two_tenants
    admin_a = bearer(a.admin, a.tenant)
    invite(admin_a, VICTIM)
    again = admin_a.post(INVITES, json={"email": VICTIM.upper(), "role": "admin"})
    assert again.status_code == 409



def test_a_token_used_meanwhile_by_another_request_is_refused(two_tenants):
    """Single use under a race: the row was read as pending, but another request's
    conditional update won first; this one must not add a second membership."""
    from app.errors import Gone
    from app.services.identity import invitations
    from tests import factories

    a, b = two_tenants
    invitation, _ = factories.make_invitation(a.tenant, b.viewer.email)
    assert invitation.status == "pending"  # loaded in this session
    with db.engine.begin() as conn:  # the other request, on its own connection
        conn.execute(text("UPDATE invitations SET status = 'accepted' WHERE id = :id"),
                     {"id": invitation.id})
    with pytest.raises(Gone):
        invitations.accept(invitation, b.viewer)
    assert not member_of(b.viewer.email, a.tenant)
