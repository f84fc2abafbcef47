"""The API keys page: the plaintext is shown once, in the create response, then never again."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest

from app.auth.pepper import api_key_pepper
from app.errors import ValidationFailed
from app.extensions import db
from app.models import ApiKey
from app.services import audit
from app.services.identity import api_keys as key_service
from tests import factories
from tests.web._support import KEY_PATTERN, htmx_headers, post_form, text


def only_key(tenant) -> ApiKey:
    db.session.expire_all()
    (key,) = key_service.list_keys(tenant)
    return key


def test_create_shows_the_key_once_and_never_again(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/api-keys", {"name": "CI pipeline", "full_access": "y"})
    body = text(response)
    assert response.status_code == 201
    assert response.headers["Cache-Control"] == "no-store"
    plaintext = KEY_PATTERN.search(body).group(0)
    assert "It will not be shown again." in body
    assert 'data-copy="#new-key-value"' in body
    key = only_key(a.tenant)
    assert key.name == "CI pipeline" and key.full_access
    assert key_service.authenticate_key(plaintext, api_key_pepper()).id == key.id
    later = text(client.get("/api-keys"))
    assert plaintext not in later
    assert KEY_PATTERN.search(later) is None
    assert f"sl_{key.prefix}_…" in later
    # Nor does it ride along in the session cookie (flashes live there).
    with client.session_transaction() as session:
        assert plaintext not in repr(dict(session))


def test_create_with_htmx_swaps_the_panel_with_the_key(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = post_form(client, "/api-keys",
                         {"name": "checker", "capabilities": "manage_vector_stores"}, htmx=True)
    body = text(response)
    assert response.status_code == 201
    assert body.lstrip().startswith('<div id="api-keys-panel"') and "<html" not in body
    assert KEY_PATTERN.search(body)
    key = only_key(a.tenant)
    assert not key.full_access and key.capabilities == ["manage_vector_stores"]
    assert KEY_PATTERN.search(text(client.get("/api-keys", headers={"HX-Request": "true"}))) \
        is None


def test_a_key_needs_full_access_or_a_capability(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/api-keys", {"name": "nothing"})
    assert response.status_code == 400
    assert "Choose full access or at least one capability." in text(response)
    assert key_service.list_keys(a.tenant) == []


def test_a_key_needs_a_name(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/api-keys", {"full_access": "y"},
                         htmx=True)
    assert response.status_code == 400
    assert 'id="name-error">Give the key a name.' in text(response)


def test_an_unknown_capability_is_refused(two_tenants, login_as):
    a, _ = two_tenants
    response = post_form(login_as(a.admin, a.tenant), "/api-keys",
                         {"name": "odd", "capabilities": "root"})
    assert response.status_code == 400
    assert key_service.list_keys(a.tenant) == []


def test_an_expiry_in_the_past_is_shown_next_to_the_field(two_tenants, login_as):
    a, _ = two_tenants
    yesterday = (date.today() - timedelta(days=2)).isoformat()
    response = post_form(login_as(a.admin, a.tenant), "/api-keys",
                         {"name": "old", "full_access": "y", "expires_at": yesterday})
    assert response.status_code == 400
    assert 'id="expires_at-error">The expiry must be in the future.' in text(response)


def test_a_key_expires_at_the_end_of_its_day(two_tenants, login_as):
    a, _ = two_tenants
    day = date.today() + timedelta(days=30)
    response = post_form(login_as(a.admin, a.tenant), "/api-keys",
                         {"name": "month", "full_access": "y", "expires_at": day.isoformat()})
    assert response.status_code == 201
    expected = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    assert only_key(a.tenant).expires_at == expected


def test_list_shows_access_last_use_expiry_and_status(two_tenants, login_as):
    a, b = two_tenants
    factories.make_key(a.tenant, name="full one")
    factories.make_key(a.tenant, full_access=False, capabilities=("manage_vector_stores",),
                       name="scoped one")
    factories.make_key(b.tenant, name="tenant b key")
    page = text(login_as(a.admin, a.tenant).get("/api-keys"))
    assert "full one" in page and "scoped one" in page and "tenant b key" not in page
    assert "Full access" in page and "Run sandbox checks</span>" in page
    assert page.count("Never") >= 4  # never used, never expires
    assert page.count('class="status status-on">Active') == 2


def test_revoke_with_htmx(two_tenants, login_as):
    a, _ = two_tenants
    key, plaintext = factories.make_key(a.tenant, name="doomed")
    client = login_as(a.admin, a.tenant)
    assert 'hx-confirm="Revoke “doomed”?' in text(client.get("/api-keys"))
    response = post_form(client, f"/api-keys/{key.id}/revoke", htmx=True)
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="api-keys-table"')
    assert "Revoked “doomed”" in body and ">Revoked</span>" in body
    assert only_key(a.tenant).revoked_at is not None
    assert key_service.authenticate_key(plaintext, api_key_pepper()) is None
    again = post_form(client, f"/api-keys/{key.id}/revoke", htmx=True)
    assert again.status_code == 409 and "already revoked" in text(again)


def test_revoke_by_plain_form_redirects(two_tenants, login_as):
    a, _ = two_tenants
    key, _ = factories.make_key(a.tenant)
    response = post_form(login_as(a.admin, a.tenant), f"/api-keys/{key.id}/revoke")
    assert response.status_code == 302 and response.headers["Location"] == "/api-keys"
    assert only_key(a.tenant).revoked_at is not None


def test_another_tenants_key_is_404(two_tenants, login_as):
    a, b = two_tenants
    key, _ = factories.make_key(b.tenant)
    response = post_form(login_as(a.owner, a.tenant), f"/api-keys/{key.id}/revoke")
    assert response.status_code == 404
    assert only_key(b.tenant).revoked_at is None


def test_contributor_cannot_create_or_revoke(two_tenants, login_as):
    a, _ = two_tenants
    key, _ = factories.make_key(a.tenant)
    client = login_as(a.contributor, a.tenant)
    assert post_form(client, "/api-keys", {"name": "x", "full_access": "y"}).status_code == 403
    assert post_form(client, f"/api-keys/{key.id}/revoke").status_code == 403
    assert only_key(a.tenant).revoked_at is None


def add_keys(tenant, count: int) -> list[ApiKey]:
    actor = audit.SystemActor("seed@example.test")
    return [key_service.create_key(tenant, actor, name=f"key-{i:03d}", full_access=True,
                                   capabilities=[], expires_at=None,
                                   pepper=factories.PEPPER)[0] for i in range(count)]


def key_names(html: str) -> list[str]:
    return re.findall(r'class="person-name">(key-\d+)<', html)


def test_120_keys_are_paged_50_at_a_time_newest_first(two_tenants, login_as):
    a, b = two_tenants
    add_keys(a.tenant, 120)
    add_keys(b.tenant, 3)
    client = login_as(a.admin, a.tenant)
    first = text(client.get("/api-keys"))
    assert key_names(first) == [f"key-{i:03d}" for i in range(119, 69, -1)]
    assert "1–50 of 120" in first and '<span class="count">120</span>' in first
    assert 'href="/api-keys?page=2"' in first and 'rel="prev"' not in first
    second = text(client.get("/api-keys?page=2"))
    assert key_names(second) == [f"key-{i:03d}" for i in range(69, 19, -1)]
    assert "51–100 of 120" in second and 'href="/api-keys?page=1"' in second
    last = text(client.get("/api-keys?page=99"))  # clamped to the last page
    assert key_names(last) == [f"key-{i:03d}" for i in range(19, -1, -1)]
    assert "101–120 of 120" in last and 'rel="next"' not in last


def test_a_revoke_on_page_2_shows_page_2_again(two_tenants, login_as):
    a, _ = two_tenants
    keys = add_keys(a.tenant, 60)
    client = login_as(a.admin, a.tenant)
    target = keys[5]  # newest first: on page 2
    headers = {**htmx_headers(client), "HX-Current-URL": "http://localhost/api-keys?page=2"}
    response = client.post(f"/api-keys/{target.id}/revoke", headers=headers)
    body = text(response)
    assert response.status_code == 200 and "51–60 of 60" in body
    assert "key-005" in body and "key-059" not in body


def test_an_unknown_capability_is_refused_in_words_with_the_machine_field_kept(two_tenants):
    """The sentence names what a key may do, not `manage_vector_stores`; the API still
    gets the field path and the allowed values in the details."""
    a, _ = two_tenants
    with pytest.raises(ValidationFailed) as caught:
        key_service.create_key(a.tenant, audit.SystemActor("x@example.test"), name="k",
                               full_access=False, capabilities=["delete_everything"],
                               expires_at=None, pepper=factories.PEPPER)
    assert caught.value.message == \
        "Unknown capability: a key can only be allowed to run sandbox checks."
    assert "_" not in caught.value.message
    (error,) = caught.value.errors
    assert error["field"] == "capabilities[0]" and error["allowed"] == ["manage_vector_stores"]
