"""Bad JSON of any kind is a 400 `bad_request` (or a 413 when too long) in the one envelope,
never a 500: too deep, invalid UTF-8, lone surrogates, NaN, numbers past the digit limit."""

from __future__ import annotations

import pytest

from tests import factories

DEEP_ARRAY = b"[" * 100_000 + b"]" * 100_000
BAD_BODIES = {
    "100k-deep array": DEEP_ARRAY,
    "100k-deep object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "deep under the recursion limit": b'{"email":' + b"[" * 900 + b"]" * 900 + b"}",
    "deep inside a field": b'{"email": "a@b.test", "password": ' + b"[" * 200 + b"]" * 200
                           + b"}",
    "invalid utf-8": b'{"email": "\xff\xfe@x.test", "password": "x"}',
    "lone surrogate": b'{"email": "\\ud800@x.test", "password": "x"}',
    "NaN": b'{"email": "a@b.test", "password": "x", "tenant_id": NaN}',
    "Infinity": b'{"email": "a@b.test", "password": "x", "tenant_id": Infinity}',
    "5000-digit number": b'{"email": "a@b.test", "password": "x", "tenant_id": '
                         + b"9" * 5000 + b"}",
    "truncated": b'{"email": "a@b.test", "password": ',
    "empty": b"",
}


def _envelope_code(response) -> str | None:
    body = response.get_json(silent=True) or {}
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_bad_json_on_login_is_a_bad_request(client, name):
    response = client.post("/api/v1/auth/login", data=BAD_BODIES[name],
                           content_type="application/json")
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert _envelope_code(response) == "bad_request"
    assert response.get_json()["success"] is False


def test_an_over_long_json_body_is_payload_too_large(app, client):
    body = b'{"email": "' + b"a" * (app.config["MAX_CONTENT_LENGTH"] + 10) + b'"}'
    response = client.post("/api/v1/auth/login", data=body, content_type="application/json")
    assert response.status_code == 413
    assert _envelope_code(response) == "payload_too_large"


def test_a_bare_list_route_refuses_deep_json_too(two_tenants, key_client):
    """PUT categories also takes a bare JSON list: its own reading path must refuse too."""
    from tests.sweeps.routes import make_catalog_skill

    a, _ = two_tenants
    catalog_id = make_catalog_skill(a.tenant)
    api = key_client(a.tenant)
    response = api.put(f"/api/v1/skills/catalog/{catalog_id}/categories", data=DEEP_ARRAY,
                       content_type="application/json")
    assert response.status_code == 400 and _envelope_code(response) == "bad_request"


def test_reasonable_nesting_still_works(client):
    user = factories.make_user("nest@example.test", factories.make_tenant("Nest"))
    response = client.post("/api/v1/auth/login", json={
        "email": user.email, "password": factories.PASSWORD})
    assert response.status_code == 200
