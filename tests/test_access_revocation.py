"""Sessions and keys that outlive access (issue 9 item 4): logout ends the session on the
server, and removing a member revokes the API keys they created and ends their sandboxes."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.backends.base import SandboxNotFound
from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.models import ApiKey, AuditEvent, BindingState, Job, SandboxSession
from app.services.identity import api_keys
from app.services.sessions import lifecycle as sessions
from tests import factories
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, require_docker
from tests.jobs.helpers import wait_for_terminal
from tests.sweeps import world
from tests.sweeps.routes import make_sandbox_config
from tests.web._support import post_form

END_SESSIONS = "end_member_sessions"


@pytest.fixture
def two_tenants(app):
    return world.two_tenants()


def sign_in(app, user, password: str = factories.PASSWORD):
    """A real sign-in through the login form, as a browser does it."""
    client = app.test_client()
    response = post_form(client, "/login", {"email": user.email, "password": password},
                         token_from="/login")
    assert response.status_code == 302, response.get_data(as_text=True)[:300]
    return client


def session_cookie(app, client) -> str:
    return client.get_cookie(app.config["SESSION_COOKIE_NAME"]).value


def replay(app, cookie: str):
    """A fresh client that presents a copied session cookie."""
    thief = app.test_client()
    thief.set_cookie(app.config["SESSION_COOKIE_NAME"], cookie)
    return thief


# -- logout --------------------------------------------------------------------------------

def test_a_cookie_copied_before_logout_is_refused_afterwards(app, two_tenants):
    a, _ = two_tenants
    client = sign_in(app, a.viewer)
    copied = session_cookie(app, client)
    assert replay(app, copied).get("/account").status_code == 200
    assert post_form(client, "/logout").status_code == 302
    response = replay(app, copied).get("/account")
    assert response.status_code == 302 and response.headers["Location"].startswith("/login")


def test_logout_keeps_the_users_other_devices_signed_in(app, two_tenants):
    a, _ = two_tenants
    laptop, phone = sign_in(app, a.viewer), sign_in(app, a.viewer)
    post_form(laptop, "/logout")
    assert phone.get("/account").status_code == 200
    assert laptop.get("/account").status_code == 302


def test_a_session_without_a_server_side_record_is_refused(app, two_tenants):
    """A cookie signed with the key but naming no live login (forged or from before this
    build) does not sign anyone in."""
    a, _ = two_tenants
    client = app.test_client()
    with client.session_transaction() as session:
        session["_user_id"] = a.viewer.get_id()
        session["_fresh"] = True
    assert client.get("/account").status_code == 302


def test_a_password_change_ends_every_session(app, two_tenants):
    a, _ = two_tenants
    other = sign_in(app, a.viewer)
    client = sign_in(app, a.viewer)
    response = post_form(client, "/account", {"current_password": factories.PASSWORD,
                                              "new_password": "a-brand-new-pw",
                                              "confirm": "a-brand-new-pw"},
                         token_from="/account")
    assert response.status_code == 302, response.get_data(as_text=True)[:400]
    assert client.get("/account").status_code == 200
    assert other.get("/account").status_code == 302


def test_bearer_tokens_are_short_lived_and_end_with_access(app, two_tenants, bearer):
    """Bearer tokens are stateless JWTs (JWT_TTL_SECONDS): a web logout does not end them;
    a password change or losing the membership does, at once."""
    a, _ = two_tenants
    client = sign_in(app, a.viewer)
    token = bearer(a.viewer, a.tenant)
    post_form(client, "/logout")
    assert token.get("/api/v1/auth/me").status_code == 200
    a.viewer.set_password("another-password", method="pbkdf2:sha256:1000")
    db.session.commit()
    assert token.get("/api/v1/auth/me").status_code == 401
    contributor = bearer(a.contributor, a.tenant)
    owner = bearer(a.owner, a.tenant)
    assert owner.delete(f"/api/v1/members/{a.membership(a.contributor).id}").status_code == 200
    assert contributor.get("/api/v1/auth/me").status_code == 401


# -- removing a member ---------------------------------------------------------------------

def test_removing_a_member_revokes_the_keys_they_created(two_tenants, bearer):
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    created = admin.post("/api/v1/api-keys", json={"name": "admin's key", "full_access": True})
    assert created.status_code == 201, created.get_json()
    plaintext = created.get_json()["data"]["key"]
    _, owners = api_keys.create_key(a.tenant, _Actor(a.owner), name="owner's key",
                                    full_access=True, capabilities=[], expires_at=None,
                                    pepper=factories.PEPPER)
    key_api = bearer(a.owner, a.tenant)
    assert key_api.client.get("/api/v1/auth/me",
                              headers={"X-API-Key": plaintext}).status_code == 200
    response = key_api.delete(f"/api/v1/members/{a.membership(a.admin).id}")
    assert response.status_code == 200
    assert key_api.client.get("/api/v1/auth/me",
                              headers={"X-API-Key": plaintext}).status_code == 401
    assert key_api.client.get("/api/v1/auth/me",
                              headers={"X-API-Key": owners}).status_code == 200
    revoked = db.session.scalar(select(ApiKey).where(ApiKey.name == "admin's key"))
    assert revoked.revoked_at is not None
    event = db.session.scalar(select(AuditEvent).where(AuditEvent.action == "api_key.revoked"))
    assert event is not None and event.data["reason"] == "member removed"


def test_removing_a_member_without_sessions_starts_no_job(two_tenants, bearer):
    a, _ = two_tenants
    owner = bearer(a.owner, a.tenant)
    assert owner.delete(f"/api/v1/members/{a.membership(a.viewer).id}").status_code == 200
    assert db.session.scalar(select(Job).where(Job.kind == END_SESSIONS)) is None


def _end_job() -> Job:
    job = db.session.scalar(select(Job).where(Job.kind == END_SESSIONS))
    assert job is not None, "removing a member with sessions must start a job"
    return wait_for_terminal(job.id)


def test_removing_a_member_destroys_their_sandboxes_on_docker(two_tenants, bearer):
    require_docker()
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    config = admin.post("/api/v1/sandbox-configs", json={"name": "local", "config": {
        "sandbox_type": "docker", "docker": {"image": BASE_IMAGE, "network_mode": "none"}}})
    assert config.status_code == 201, config.get_json()
    member = bearer(a.contributor, a.tenant)
    opened = member.post("/api/v1/sessions", json={"sandbox_config_id":
                                                   config.get_json()["data"]["id"]})
    session_id = opened.get_json()["data"]["id"]
    ran = member.post(f"/api/v1/sessions/{session_id}/exec", json={"command": "true"})
    sandbox_id = ran.get_json()["data"]["sandbox_id"]
    engine = DockerBackend({"image": BASE_IMAGE, "host": DOCKER_HOST})
    try:
        assert engine.get(sandbox_id) is not None
        keep = admin.post("/api/v1/sessions", json={"sandbox_config_id":
                                                    config.get_json()["data"]["id"]})
        response = admin.delete(f"/api/v1/members/{a.membership(a.contributor).id}")
        assert response.status_code == 200
        job = _end_job()
        assert job.status == "succeeded", job.error
        with pytest.raises(SandboxNotFound):
            engine.get(sandbox_id)
        db.session.expire_all()
        assert db.session.get(SandboxSession, session_id) is None
        assert db.session.get(SandboxSession, keep.get_json()["data"]["id"]) is not None
    finally:
        try:
            engine.delete(sandbox_id)
        except SandboxNotFound:
            pass
        engine.close()


def test_an_unreachable_provider_still_closes_the_session_record(two_tenants, bearer):
    a, _ = two_tenants
    config_id = make_sandbox_config(a.tenant)  # E2B at a closed loopback port
    session_id = sessions.create_session(a.tenant, a.contributor, config_id, "lost").id
    row = db.session.get(SandboxSession, session_id)
    row.binding_state, row.sandbox_id, row.provider = BindingState.bound, "sbx-gone", "e2b"
    db.session.commit()
    response = bearer(a.owner, a.tenant).delete(
        f"/api/v1/members/{a.membership(a.contributor).id}")
    assert response.status_code == 200
    job = _end_job()
    assert job.status == "succeeded", job.error
    db.session.expire_all()
    assert db.session.get(SandboxSession, session_id) is None
    assert "127.0.0.1" not in (job.log or "") and "could not be reached" in (job.log or "")


class _Actor:
    def __init__(self, user):
        self.actor_id, self.actor_label = user.id, user.email
