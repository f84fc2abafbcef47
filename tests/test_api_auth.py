"""API sign-in, bearer token lifetime, identity introspection, and request-body handling."""

from __future__ import annotations

import jwt
import pytest

from app.extensions import db
from app.models import Role
from app.security import tokens
from tests import factories
from tests.sweeps import world
from tests.sweeps.routes import call

LOGIN = "/api/v1/auth/login"
ME = "/api/v1/auth/me"


@pytest.fixture
def two_tenants(app):
    """The conftest world, copied back from rows instead of hashing eight passwords again."""
    return world.two_tenants()


def envelope_code(response) -> str:
    body = response.get_json()
    assert body["success"] is False and isinstance(body["error"]["message"], str), body
    return body["error"]["code"]


def login(client, **body):
    return client.post(LOGIN, json=body)


def token_for(app, user, tenant, ttl: int = 600, secret: str | None = None) -> str:
    claims = tokens.TokenClaims(user.id, tenant.id, user.session_version)
    return tokens.issue(claims, secret or app.config["SECRET_KEY"], ttl)[0]


def me(app, token: str):
    return call(app, app.test_client(), "GET", ME, headers={"Authorization": f"Bearer {token}"})


# -- sign-in -----------------------------------------------------------------------------

def test_login_returns_a_working_token(app, client, two_tenants):
    a, _ = two_tenants
    response = login(client, email=a.admin.email, password=factories.PASSWORD)
    assert response.status_code == 200
    data = response.get_json()["data"]
    assert data["tenant_id"] == a.tenant.id and data["role"] == "admin"
    assert data["expires_at"].startswith("20")
    assert me(app, data["token"]).get_json()["data"]["user"]["email"] == a.admin.email


def test_login_email_is_case_and_space_insensitive(client, two_tenants):
    a, _ = two_tenants
    response = login(client, email=f"  {a.viewer.email.upper()} ", password=factories.PASSWORD)
    assert response.status_code == 200


def test_wrong_password_and_unknown_email_fail_alike(client, two_tenants):
    a, _ = two_tenants
    wrong = login(client, email=a.owner.email, password="not-the-password")
    unknown = login(client, email="nobody@nowhere.test", password=factories.PASSWORD)
    assert wrong.status_code == unknown.status_code == 401
    assert envelope_code(wrong) == envelope_code(unknown) == "unauthorized"
    assert wrong.get_json()["error"]["message"] == unknown.get_json()["error"]["message"]


def test_login_into_a_tenant_the_user_is_not_a_member_of(client, two_tenants):
    a, b = two_tenants
    response = login(client, email=a.owner.email, password=factories.PASSWORD,
                     tenant_id=b.tenant.id)
    assert response.status_code == 401 and envelope_code(response) == "unauthorized"


def test_login_picks_the_requested_tenant(client, two_tenants):
    a, b = two_tenants
    factories.make_user(a.viewer.email, b.tenant, Role.admin)
    default = login(client, email=a.viewer.email, password=factories.PASSWORD)
    chosen = login(client, email=a.viewer.email, password=factories.PASSWORD,
                   tenant_id=b.tenant.id)
    assert default.get_json()["data"]["tenant_id"] == a.tenant.id
    chosen = chosen.get_json()["data"]
    assert (chosen["tenant_id"], chosen["role"]) == (b.tenant.id, "admin")


def test_inactive_user_can_neither_sign_in_nor_use_a_token(app, client, two_tenants):
    a, _ = two_tenants
    token = token_for(app, a.viewer, a.tenant)
    a.viewer.is_active = False
    db.session.commit()
    assert login(client, email=a.viewer.email, password=factories.PASSWORD).status_code == 401
    assert me(app, token).status_code == 401


# -- token lifetime ----------------------------------------------------------------------

def test_expired_token_is_refused(app, two_tenants):
    a, _ = two_tenants
    response = me(app, token_for(app, a.admin, a.tenant, ttl=-1))
    assert response.status_code == 401 and envelope_code(response) == "unauthorized"


def test_token_signed_with_another_secret_is_refused(app, two_tenants):
    a, _ = two_tenants
    assert me(app, token_for(app, a.admin, a.tenant, secret="x" * 40)).status_code == 401


def test_token_for_another_audience_or_algorithm_is_refused(app, two_tenants):
    a, _ = two_tenants
    claims = {"sub": str(a.admin.id), "tid": a.tenant.id, "sv": a.admin.session_version,
              "exp": 4102444800}
    secret = app.config["SECRET_KEY"]
    wrong_aud = jwt.encode({**claims, "aud": "someone-else"}, secret, algorithm="HS256")
    unsigned = jwt.encode({**claims, "aud": tokens.AUDIENCE}, None, algorithm="none")
    assert me(app, wrong_aud).status_code == 401
    assert me(app, unsigned).status_code == 401


def test_token_dies_when_the_password_changes(app, two_tenants):
    a, _ = two_tenants
    token = token_for(app, a.admin, a.tenant)
    assert me(app, token).status_code == 200
    a.admin.set_password("a-brand-new-password")
    db.session.commit()
    response = me(app, token)
    assert response.status_code == 401 and envelope_code(response) == "unauthorized"


def test_token_dies_when_the_membership_is_removed(app, two_tenants):
    a, _ = two_tenants
    token = token_for(app, a.contributor, a.tenant)
    db.session.delete(a.membership(a.contributor))
    db.session.commit()
    response = me(app, token)
    assert response.status_code == 401 and envelope_code(response) == "unauthorized"


def test_token_follows_a_role_change(app, two_tenants):
    a, _ = two_tenants
    token = token_for(app, a.viewer, a.tenant)
    a.membership(a.viewer).role = Role.admin
    db.session.commit()
    assert me(app, token).get_json()["data"]["role"] == "admin"


# -- /auth/me ----------------------------------------------------------------------------

def test_me_by_bearer(app, two_tenants):
    a, b = two_tenants
    factories.make_user(a.owner.email, b.tenant, Role.viewer)
    data = me(app, token_for(app, a.owner, a.tenant)).get_json()["data"]
    assert data["tenant"] == {"id": a.tenant.id, "name": a.tenant.name}
    assert data["role"] == "owner" and data["api_key"] is None
    assert data["user"] == {"id": a.owner.id, "email": a.owner.email}
    assert [(m["tenant_id"], m["role"]) for m in data["memberships"]] == [
        (a.tenant.id, "owner"), (b.tenant.id, "viewer")]


def test_me_by_api_key(app, two_tenants):
    a, _ = two_tenants
    key, plaintext = factories.make_key(a.tenant, full_access=False,
                                        capabilities=("manage_vector_stores",), name="probe")
    response = call(app, app.test_client(), "GET", ME, headers={"X-API-Key": plaintext})
    assert response.status_code == 200
    data = response.get_json()["data"]
    assert data["tenant"]["id"] == a.tenant.id
    assert data["user"] is None and data["role"] is None and data["memberships"] == []
    assert data["api_key"] == {"id": key.id, "name": "probe", "prefix": key.prefix,
                               "full_access": False, "capabilities": ["manage_vector_stores"]}
    assert plaintext not in response.get_data(as_text=True)


def test_me_without_credentials(client):
    response = client.get(ME)
    assert response.status_code == 401 and envelope_code(response) == "unauthorized"


# -- request bodies ----------------------------------------------------------------------

def test_malformed_json_is_a_bad_request(client):
    response = client.post(LOGIN, data='{"email": "a@b.c",', content_type="application/json")
    assert response.status_code == 400 and envelope_code(response) == "bad_request"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          None])
def test_a_body_that_is_not_json_is_unsupported(client, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post(LOGIN, data='{"email": "a@b.c", "password": "x"}', headers=headers)
    assert response.status_code == 415 and envelope_code(response) == "unsupported_media_type"


def test_a_json_array_is_not_an_object(client):
    response = client.post(LOGIN, json=[{"email": "a@b.c"}])
    assert response.status_code == 400 and envelope_code(response) == "validation_failed"
    assert response.get_json()["error"]["data"]["errors"][0]["field"] == "body"


def test_wrong_types_and_unknown_fields_are_listed_per_field(client):
    response = client.post(LOGIN, json={"email": 42, "password": ["x"], "tenant_id": "two",
                                        "remember": True})
    assert response.status_code == 400 and envelope_code(response) == "validation_failed"
    errors = response.get_json()["error"]["data"]["errors"]
    fields = {e["field"] for e in errors}
    assert fields == {"email", "password", "tenant_id", "remember"}
    assert all(isinstance(e["message"], str) and e["message"] for e in errors)
    assert next(e for e in errors if e["field"] == "remember")["message"] == \
        "Unknown field “remember”: remove it."


def test_missing_fields_are_listed(client):
    response = client.post(LOGIN, json={})
    assert {e["field"] for e in response.get_json()["error"]["data"]["errors"]} == {
        "email", "password"}


def test_validation_errors_do_not_echo_the_input(client):
    response = client.post(LOGIN, json={"email": "x", "password": "p" * 2000})
    assert response.status_code == 400
    assert "p" * 50 not in response.get_data(as_text=True)


def test_nul_characters_are_a_field_error(client):
    response = client.post(LOGIN, json={"email": "a\x00@b.c", "password": "x"})
    assert response.status_code == 400 and envelope_code(response) == "validation_failed"
    assert response.get_json()["error"]["data"]["errors"] == [
        {"field": "email", "message": "Email must not contain a NUL character."}]


def test_oversize_body_is_refused(client, app):
    limit = app.config["MAX_CONTENT_LENGTH"]
    assert limit == 1024 * 1024
    body = '{"email": "a@b.c", "password": "' + "x" * limit + '"}'
    response = client.post(LOGIN, data=body, content_type="application/json")
    assert response.status_code == 413 and envelope_code(response) == "payload_too_large"


def test_unknown_api_path_and_wrong_method_use_the_envelope(client):
    assert envelope_code(client.get("/api/v1/no-such-thing")) == "not_found"
    response = client.get(LOGIN)
    assert response.status_code == 405 and envelope_code(response) == "method_not_allowed"


def test_api_responses_are_not_cached(client):
    assert client.post(LOGIN, json={}).headers["Cache-Control"] == "no-store"
