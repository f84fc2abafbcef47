"""Workspace members over the API: change role, remove (people join by invitation), the
owner rules, and one audit event per successful mutation, committed together with it."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from app.extensions import db
from app.models import AuditEvent, Membership, Role, User
from tests import factories
from tests.sweeps import world
from tests.sweeps.routes import describe_change, fingerprint

MEMBERS = "/api/v1/members"


@pytest.fixture
def two_tenants(app):
    """The conftest world, copied back from rows instead of hashing eight passwords again."""
    return world.two_tenants()


@dataclass(frozen=True)
class State:
    audit: int
    members: tuple
    users: int


def state() -> State:
    with db.engine.connect() as conn:
        members = tuple(conn.execute(select(Membership.id, Membership.user_id, Membership.role)
                                     .order_by(Membership.id)).all())
        return State(conn.scalar(select(func.count()).select_from(AuditEvent.__table__)),
                     members, conn.scalar(select(func.count()).select_from(User.__table__)))


@contextmanager
def commits():
    """The database state after every commit made inside the block, read on the side."""
    seen: list[State] = []

    def after_commit(session):
        seen.append(state())

    event.listen(Session, "after_commit", after_commit)
    try:
        yield seen
    finally:
        event.remove(Session, "after_commit", after_commit)


def assert_one_audited_commit(before: State, seen: list[State], action: str) -> None:
    """Exactly one audit event was added, and never apart from the change it records."""
    assert seen, "nothing was committed"
    for snapshot in seen:
        changed = (snapshot.members, snapshot.users) != (before.members, before.users)
        assert snapshot.audit - before.audit == (1 if changed else 0), (
            "the change and its audit event were committed separately")
    assert seen[-1].audit == before.audit + 1
    latest = db.session.scalars(select(AuditEvent).order_by(AuditEvent.id.desc())).first()
    assert latest.action == action


@contextmanager
def writes_nothing():
    before = fingerprint()
    yield
    change = describe_change(before, fingerprint())
    assert not change, f"a refused request wrote: {change}"


def code(response) -> str:
    return response.get_json()["error"]["code"]


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


@pytest.fixture
def owner_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.owner, a.tenant)


def test_list_members(admin_api, two_tenants):
    a, _ = two_tenants
    response = admin_api.get(MEMBERS)
    assert response.status_code == 200
    rows = response.get_json()["data"]
    assert [r["email"] for r in rows] == sorted(u.email for u in a.by_role.values())
    assert {r["email"]: r["role"] for r in rows} == {u.email: r.value
                                                      for r, u in a.by_role.items()}
    assert set(rows[0]) == {"id", "user_id", "email", "role", "created_at"}


def test_an_admin_cannot_make_an_owner(admin_api, two_tenants):
    a, b = two_tenants
    with writes_nothing():
        invited = admin_api.post("/api/v1/invitations", json={"email": b.viewer.email,
                                                              "role": "owner"})
        promoted = admin_api.patch(f"{MEMBERS}/{a.membership(a.viewer).id}",
                                   json={"role": "owner"})
    for response in (invited, promoted):
        assert response.status_code == 403 and code(response) == "forbidden"


def test_an_admin_cannot_demote_or_remove_an_owner(admin_api, two_tenants):
    a, _ = two_tenants
    owner = a.membership(a.owner).id
    with writes_nothing():
        demoted = admin_api.patch(f"{MEMBERS}/{owner}", json={"role": "admin"})
        removed = admin_api.delete(f"{MEMBERS}/{owner}")
    for response in (demoted, removed):
        assert response.status_code == 403 and code(response) == "forbidden"


def test_an_owner_can_make_an_owner(owner_api, two_tenants):
    a, _ = two_tenants
    before = state()
    with commits() as seen:
        response = owner_api.patch(f"{MEMBERS}/{a.membership(a.admin).id}",
                                   json={"role": "owner"})
    assert response.status_code == 200 and response.get_json()["data"]["role"] == "owner"
    assert_one_audited_commit(before, seen, "member.role_changed")


def test_the_last_owner_can_be_neither_demoted_nor_removed(owner_api, two_tenants):
    a, _ = two_tenants
    own = a.membership(a.owner).id
    with writes_nothing():
        demoted = owner_api.patch(f"{MEMBERS}/{own}", json={"role": "admin"})
        removed = owner_api.delete(f"{MEMBERS}/{own}")
    for response in (demoted, removed):
        assert response.status_code == 409 and code(response) == "conflict"


def test_with_a_second_owner_an_owner_may_step_down(owner_api, two_tenants):
    a, _ = two_tenants
    factories.make_user("second-owner@tenant-a.test", a.tenant, Role.owner)
    before = state()
    with commits() as seen:
        response = owner_api.patch(f"{MEMBERS}/{a.membership(a.owner).id}",
                                   json={"role": "admin"})
    assert response.status_code == 200
    assert_one_audited_commit(before, seen, "member.role_changed")


def test_change_role_records_from_and_to(admin_api, two_tenants):
    a, _ = two_tenants
    target = a.membership(a.viewer).id
    before = state()
    with commits() as seen:
        response = admin_api.patch(f"{MEMBERS}/{target}", json={"role": "contributor"})
    assert response.status_code == 200 and response.get_json()["data"]["role"] == "contributor"
    assert_one_audited_commit(before, seen, "member.role_changed")
    latest = db.session.scalars(select(AuditEvent).order_by(AuditEvent.id.desc())).first()
    assert latest.data["from"] == "viewer" and latest.data["to"] == "contributor"
    assert latest.actor_id == a.admin.id and latest.tenant_id == a.tenant.id


def test_setting_the_same_role_changes_nothing(admin_api, two_tenants):
    a, _ = two_tenants
    with writes_nothing():
        response = admin_api.patch(f"{MEMBERS}/{a.membership(a.viewer).id}",
                                   json={"role": "viewer"})
    assert response.status_code == 200


def test_remove_a_member(admin_api, two_tenants, bearer):
    a, _ = two_tenants
    removed_token = bearer(a.contributor, a.tenant)
    target = a.membership(a.contributor).id
    before = state()
    with commits() as seen:
        response = admin_api.delete(f"{MEMBERS}/{target}")
    assert response.status_code == 200
    assert response.get_json()["data"]["email"] == a.contributor.email
    assert_one_audited_commit(before, seen, "member.removed")
    assert db.session.get(User, a.contributor.id) is not None  # the user stays
    assert removed_token.get("/api/v1/auth/me").status_code == 401


def test_unknown_member_is_not_found(admin_api):
    with writes_nothing():
        assert admin_api.delete(f"{MEMBERS}/999999").status_code == 404
        assert admin_api.patch(f"{MEMBERS}/999999", json={"role": "viewer"}).status_code == 404


def test_role_body_is_validated(admin_api, two_tenants):
    a, _ = two_tenants
    with writes_nothing():
        response = admin_api.patch(f"{MEMBERS}/{a.membership(a.viewer).id}",
                                   json={"role": "viewer", "email": "x@y.z"})
    assert code(response) == "validation_failed"
    assert response.get_json()["error"]["data"]["errors"] == [
        {"field": "email", "message": "Unknown field “email”: remove it."}]
