"""What a member's exit takes with it (hygiene item 1): their personal variable values in
that workspace go in the same transaction as the removal, so a member invited back later
starts with nothing of what they stored before; their keys are revoked and their sessions
ended. The same holds for a user deleted with `flask users delete`."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.models import (
    ApiKey,
    AuditEvent,
    Job,
    PersonalEnvVar,
    Role,
    SandboxRemoval,
    SandboxSession,
    User,
)
from app.services.identity import api_keys, users
from app.services.personal import values as personal_env
from app.services.sessions import lifecycle as sessions
from app.web._format import describe_event
from tests import factories
from tests.sweeps import world
from tests.sweeps.routes import make_sandbox_config

SECRET = "sk-live-member-exit-0123456789"


@pytest.fixture
def two_tenants(app):
    return world.two_tenants()


def _rows_of(tenant_id: int, user_id: int) -> int:
    return db.session.scalar(select(func.count()).select_from(PersonalEnvVar).where(
        PersonalEnvVar.tenant_id == tenant_id, PersonalEnvVar.principal_id == str(user_id)))


def _store_values(tenant, user) -> str:
    config_id = make_sandbox_config(tenant)
    who = personal_env.Who.user(tenant, user)
    personal_env.set_config_value(who, config_id, "OPENAI_API_KEY", SECRET)
    personal_env.set_config_value(who, config_id, "OTHER_TOKEN", SECRET + "-2")
    return config_id


def test_a_removed_member_invited_back_does_not_get_their_old_values(two_tenants, bearer):
    a, b = two_tenants
    config_id = _store_values(a.tenant, a.contributor)
    kept = personal_env.Who.user(a.tenant, a.admin)
    personal_env.set_config_value(kept, config_id, "OPENAI_API_KEY", "admin-own-value")
    users.grant(b.tenant, a.contributor, Role.contributor)  # the same person elsewhere
    db.session.commit()
    config_b = _store_values(b.tenant, a.contributor)
    assert _rows_of(a.tenant.id, a.contributor.id) == 2

    removed = bearer(a.owner, a.tenant).delete(
        f"/api/v1/members/{a.membership(a.contributor).id}")
    assert removed.status_code == 200, removed.get_json()
    db.session.expire_all()
    assert _rows_of(a.tenant.id, a.contributor.id) == 0
    # Nobody else's values go, and the same person's values in another workspace stay.
    assert [s.value for s in personal_env.read_own(kept)] == ["admin-own-value"]
    assert _rows_of(b.tenant.id, a.contributor.id) == 2
    assert {s.sandbox_config_id for s in personal_env.read_own(
        personal_env.Who.user(b.tenant, a.contributor))} == {config_b}
    event = db.session.scalar(select(AuditEvent).where(
        AuditEvent.tenant_id == a.tenant.id, AuditEvent.action == "personal_env.forgotten"))
    assert event is not None and event.object_id == str(a.contributor.id)
    assert event.data == {"count": 2, "reason": "member removed"}
    assert SECRET not in str(event.data)
    assert describe_event(event) == "deleted 2 personal variable value(s) of a departing member"

    users.grant(a.tenant, a.contributor, Role.contributor)  # invited back
    db.session.commit()
    listed = bearer(a.contributor, a.tenant).get("/api/v1/me/env-vars")
    assert listed.status_code == 200, listed.get_json()
    assert SECRET not in listed.get_data(as_text=True)
    group = next(g for g in listed.get_json()["data"] if g["sandbox_config_id"] == config_id)
    assert group["vars"] == []


def test_a_refused_removal_keeps_the_values(two_tenants, bearer):
    """The removal and the forgetting are one transaction: a refused removal forgets nothing."""
    a, _ = two_tenants
    _store_values(a.tenant, a.owner)
    refused = bearer(a.owner, a.tenant).delete(f"/api/v1/members/{a.membership(a.owner).id}")
    assert refused.status_code == 409, refused.get_json()
    db.session.expire_all()
    assert _rows_of(a.tenant.id, a.owner.id) == 2


def test_deleting_a_user_from_the_cli_forgets_values_revokes_keys_and_ends_sessions(
        app, two_tenants):
    a, b = two_tenants
    users.grant(b.tenant, a.admin, Role.viewer)
    db.session.commit()
    config_id = _store_values(a.tenant, a.admin)
    _store_values(b.tenant, a.admin)
    _, plaintext = api_keys.create_key(a.tenant, _Actor(a.admin), name="admin key",
                                       full_access=True, capabilities=[], expires_at=None,
                                       pepper=factories.PEPPER)
    session_id = sessions.create_session(a.tenant, a.admin, config_id, "open").id
    user_id, email = a.admin.id, a.admin.email
    db.session.commit()

    result = app.test_cli_runner().invoke(args=["users", "delete", email])
    assert result.exit_code == 0, result.output
    assert "deleted" in result.output and SECRET not in result.output
    db.session.expire_all()
    assert db.session.get(User, user_id) is None
    assert db.session.scalar(select(func.count()).select_from(PersonalEnvVar).where(
        PersonalEnvVar.principal_id == str(user_id))) == 0
    key = db.session.scalar(select(ApiKey).where(ApiKey.name == "admin key"))
    assert key.revoked_at is not None
    assert db.session.get(SandboxSession, session_id) is None
    assert db.session.scalar(select(SandboxRemoval).where(
        SandboxRemoval.session_id == session_id)) is not None  # the sweeper removes the sandbox
    for tenant in (a.tenant, b.tenant):
        events = list(db.session.scalars(select(AuditEvent).where(
            AuditEvent.tenant_id == tenant.id,
            AuditEvent.action.in_(["member.removed", "personal_env.forgotten"]))))
        assert {(e.action, e.data.get("reason")) for e in events} >= {
            ("member.removed", None), ("personal_env.forgotten", "user deleted")}, events
    assert db.session.scalar(select(Job).where(Job.kind == "end_member_sessions")) is None


def test_deleting_an_unknown_user_from_the_cli_fails_clearly(app, two_tenants):
    result = app.test_cli_runner().invoke(args=["users", "delete", "nobody@example.test"])
    assert result.exit_code != 0
    assert "no user" in result.output.lower()


class _Actor:
    def __init__(self, user):
        self.actor_id, self.actor_label = user.id, user.email
