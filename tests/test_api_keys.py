"""API keys over the API: shown once, stored only as a keyed digest, revocable, expiring,
touched on use, and scoped by capability."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from app import create_app
from app.auth.guards import guard
from app.extensions import db
from app.models import ApiKey, AuditEvent, Role
from tests import factories
from tests.sweeps import world
from tests.sweeps.routes import call, fingerprint

KEYS = "/api/v1/api-keys"
ME = "/api/v1/auth/me"
KEY_SHAPE = re.compile(r"^sl_([0-9a-f]{8})_([A-Za-z0-9_-]{40,})$")
CAPABILITY = "manage_vector_stores"


@pytest.fixture
def two_tenants(app):
    """The conftest world, copied back from rows instead of hashing eight passwords again."""
    return world.two_tenants()


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


def with_key(app, plaintext: str, method: str = "GET", path: str = ME, **kwargs):
    return call(app, app.test_client(), method, path, headers={"X-API-Key": plaintext},
                **kwargs)


def create(admin_api, **body):
    response = admin_api.post(KEYS, json={"name": "ci", "full_access": True, **body})
    assert response.status_code == 201, response.get_json()
    return response.get_json()["data"]


def every_stored_value() -> list[str]:
    """Every value of every row of every table, as text."""
    return [str(value) for rows in fingerprint().values() for row in rows for value in row]


def test_create_shows_the_key_once(app, admin_api, two_tenants):
    a, _ = two_tenants
    data = create(admin_api, name="  deploy bot  ")
    plaintext = data["key"]
    prefix, secret = KEY_SHAPE.match(plaintext).groups()
    assert data["api_key"]["prefix"] == prefix and data["api_key"]["name"] == "deploy bot"
    assert with_key(app, plaintext).get_json()["data"]["tenant"]["id"] == a.tenant.id

    listed = admin_api.get(KEYS)
    assert listed.status_code == 200
    assert [k["prefix"] for k in listed.get_json()["data"]] == [prefix]
    for response in (listed, admin_api.delete(f"{KEYS}/{data['api_key']['id']}")):
        text = response.get_data(as_text=True)
        assert plaintext not in text and secret not in text


def test_only_a_keyed_digest_is_stored(admin_api):
    plaintext = create(admin_api)["key"]
    secret = KEY_SHAPE.match(plaintext).group(2)
    for value in every_stored_value():
        assert plaintext not in value and secret not in value
    row = db.session.scalars(select(ApiKey)).one()
    assert row.digest != hashlib.sha256(plaintext.encode()).hexdigest()  # HMAC with a pepper
    for column in ApiKey.__table__.columns:
        assert secret not in str(getattr(row, column.key))


def test_creation_and_revocation_are_audited_without_the_key(admin_api):
    data = create(admin_api)
    admin_api.delete(f"{KEYS}/{data['api_key']['id']}")
    events = db.session.scalars(select(AuditEvent).order_by(AuditEvent.id)).all()
    assert [e.action for e in events] == ["api_key.created", "api_key.revoked"]
    assert all(data["key"] not in str(e.data) for e in events)


def test_a_revoked_key_is_refused(app, admin_api):
    data = create(admin_api)
    assert with_key(app, data["key"]).status_code == 200
    revoked = admin_api.delete(f"{KEYS}/{data['api_key']['id']}")
    assert revoked.status_code == 200 and revoked.get_json()["data"]["revoked_at"]
    response = with_key(app, data["key"])
    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "unauthorized"
    again = admin_api.delete(f"{KEYS}/{data['api_key']['id']}")
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "conflict"


def test_an_expired_key_is_refused(app, admin_api):
    data = create(admin_api)
    db.session.execute(update(ApiKey).where(ApiKey.id == data["api_key"]["id"])
                       .values(expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    db.session.commit()
    assert with_key(app, data["key"]).status_code == 401


def test_a_key_with_a_future_expiry_works_and_reads_back_in_utc(app, admin_api):
    data = create(admin_api, expires_at="2099-01-01T12:00:00+02:00")
    assert data["api_key"]["expires_at"] == "2099-01-01T10:00:00Z"
    assert with_key(app, data["key"]).status_code == 200


@pytest.mark.parametrize("presented", [
    "sl_deadbeef_" + "A" * 43, "sl_short_abc", "not-a-key", "sl_", "Bearer x",
])
def test_unknown_or_malformed_keys_are_refused(app, presented):
    response = with_key(app, presented)
    assert response.status_code == 401 and response.get_json()["error"]["code"] == "unauthorized"


def test_a_tampered_secret_is_refused(app, admin_api):
    plaintext = create(admin_api)["key"]
    tampered = plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B")
    assert with_key(app, tampered).status_code == 401


def test_last_used_at_is_set_on_use_coarsely(app, admin_api):
    data = create(admin_api)
    assert data["api_key"]["last_used_at"] is None
    with_key(app, data["key"])
    first = db.session.get(ApiKey, data["api_key"]["id"]).last_used_at
    assert first is not None and datetime.now(UTC) - first < timedelta(minutes=1)
    db.session.expire_all()
    with_key(app, data["key"])
    assert db.session.get(ApiKey, data["api_key"]["id"]).last_used_at == first
    listed = admin_api.get(KEYS).get_json()["data"][0]
    assert listed["last_used_at"] is not None


def test_keys_are_per_tenant(admin_api, two_tenants):
    a, b = two_tenants
    theirs, _ = factories.make_key(b.tenant, name="b key")
    create(admin_api)
    assert theirs.prefix not in admin_api.get(KEYS).get_data(as_text=True)
    response = admin_api.delete(f"{KEYS}/{theirs.id}")
    assert response.status_code == 404
    assert db.session.get(ApiKey, theirs.id).revoked_at is None


def test_a_key_cannot_manage_keys(app, two_tenants):
    a, _ = two_tenants
    _, plaintext = factories.make_key(a.tenant)
    before = fingerprint()
    response = with_key(app, plaintext, "POST", KEYS, json={"name": "x", "full_access": True})
    assert response.status_code == 403 and response.get_json()["error"]["code"] == "forbidden"
    after = fingerprint()
    assert before["api_keys"] == after["api_keys"] and before["audit_events"] == after[
        "audit_events"]


@pytest.mark.parametrize(("body", "field"), [
    ({"capabilities": ["launch_missiles"], "full_access": False}, "capabilities[0]"),
    ({"full_access": False}, "capabilities"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ({"expires_at": "9999-12-31T23:59:59-23:59"}, "expires_at"),
    ({"expires_at": "2099-01-01T00:00:00"}, "expires_at"),  # no time zone
    ({"name": "   "}, "name"),
    ({"name": "x" * 101}, "name"),
    ({"owner": "me"}, "owner"),
])
def test_invalid_keys_are_field_errors_and_write_nothing(admin_api, body, field):
    before = fingerprint()
    response = admin_api.post(KEYS, json={"name": "ci", "full_access": True, **body})
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["error"]["code"] == "validation_failed"
    assert field in [e["field"] for e in response.get_json()["error"]["data"]["errors"]]
    assert fingerprint() == before


# -- capability keys ---------------------------------------------------------------------

@pytest.fixture
def probe_app(app):
    """An app with one route per key policy, guarded by the real `guard` (same database)."""
    probe = create_app({"ENV": "testing",
                        "SQLALCHEMY_DATABASE_URI": app.config["SQLALCHEMY_DATABASE_URI"]})
    for policy in (CAPABILITY, "full_access", "refused", "any_key"):
        def view(policy=policy):
            return {"policy": policy}

        probe.add_url_rule(f"/api/v1/_probe/{policy}", f"probe_{policy}",
                           guard(Role.admin, api_key=policy)(view))
    return probe


@pytest.mark.parametrize(("kind", "passes"), [
    ("capability", {CAPABILITY, "any_key"}),
    ("full", {CAPABILITY, "full_access", "any_key"}),
])
def test_key_scope_decides_which_policies_pass(probe_app, two_tenants, kind, passes):
    a, _ = two_tenants
    if kind == "capability":
        _, plaintext = factories.make_key(a.tenant, full_access=False, capabilities=(CAPABILITY,))
    else:
        _, plaintext = factories.make_key(a.tenant)
    client = probe_app.test_client()
    for policy in (CAPABILITY, "full_access", "refused", "any_key"):
        response = client.get(f"/api/v1/_probe/{policy}", headers={"X-API-Key": plaintext})
        expected = 200 if policy in passes else 403
        assert response.status_code == expected, (kind, policy, response.get_json())


def test_a_capability_key_passes_real_capability_routes_only(app, two_tenants):
    """Against the real url_map: capability routes let it in, full-access routes do not."""
    a, _ = two_tenants
    _, plaintext = factories.make_key(a.tenant, full_access=False, capabilities=(CAPABILITY,))
    export = with_key(app, plaintext, "POST", "/api/v1/audit/export")
    assert export.status_code == 403
    assert with_key(app, plaintext, "GET", ME).status_code == 200


def test_a_capability_key_reads_the_jobs_it_started_and_no_other(app, two_tenants, admin_api,
                                                                   monkeypatch):
    """A manage_vector_stores key may run the sandbox check; when the check outlasts the
    wait the answer is a job id, which the key must be able to follow. Any other job, the
    admin's or another key's, stays out of its reach."""
    from app.models import Job
    from tests.sweeps.routes import make_sandbox_config

    a, _ = two_tenants
    monkeypatch.setitem(app.config, "SANDBOX_CHECK_WAIT_SECONDS", 0)
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    config_id = make_sandbox_config(a.tenant)  # a closed loopback port: nothing is reached
    _, mine = factories.make_key(a.tenant, full_access=False, capabilities=(CAPABILITY,))
    _, other = factories.make_key(a.tenant, full_access=False, capabilities=(CAPABILITY,))
    started = with_key(app, mine, "POST", "/api/v1/system/sandbox-check",
                       json={"config_id": config_id})
    assert started.status_code == 202, started.get_json()
    job_id = started.get_json()["data"]["job_id"]
    read = with_key(app, mine, "GET", f"/api/v1/jobs/{job_id}")
    assert read.status_code == 200, read.get_json()
    assert read.get_json()["data"]["id"] == job_id

    assert with_key(app, other, "GET", f"/api/v1/jobs/{job_id}").status_code == 404
    export = admin_api.post("/api/v1/audit/export").get_json()["data"]["job"]["id"]
    assert with_key(app, mine, "GET", f"/api/v1/jobs/{export}").status_code == 404
    assert admin_api.get(f"/api/v1/jobs/{job_id}").status_code == 200  # admins read all
    assert db.session.get(Job, job_id).api_key_id is not None
