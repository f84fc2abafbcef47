"""Issue 9 item 2: a stored secret is reused only with the exact endpoint it was stored with.

Two fake E2B servers on loopback: `good` is the config's provider, `evil` is an address an
attacker (a tenant admin, or a capability-only key) swaps in while sending `***` so the
stored key would follow. Every refusal is checked on the wire: `evil` records each request
it gets, and the stored key must never be among them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from app.extensions import db
from app.models import SandboxConfig
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, require_docker
from tests.factories import config_doc

BASE = "/api/v1/sandbox-configs"
CHECK = "/api/v1/system/sandbox-check"
QUERY = f"{BASE}/templates/query"
GOOD_KEY = f"good-key-{uuid.uuid4().hex[:12]}"
ENV_SECRET = f"env-secret-{uuid.uuid4().hex[:12]}"
RULE_SECRET = f"rule-secret-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def good() -> Iterator[object]:
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer("e2b", image=BASE_IMAGE, docker_host=DOCKER_HOST, api_key=GOOD_KEY,
                           run_id=f"{RUN_ID}sg").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def evil() -> Iterator[object]:
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer("e2b", image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           api_key="evil-key-0000", domain="evil.test",
                           run_id=f"{RUN_ID}se").start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _loopback_fakes(app, monkeypatch, evil):
    """The operator lets this deployment reach private endpoints (the fakes are loopback)."""
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    evil.calls.clear()


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


def e2b_doc(fake, **block) -> dict:
    settings = {k: v for k, v in fake.settings().items() if k != "allow_private_endpoints"}
    return config_doc("e2b", {**settings, **block}, env_vars={"TOKEN": ENV_SECRET})


def stored(api, doc: dict) -> str:
    response = api.post(BASE, json={"name": f"c-{uuid.uuid4().hex[:6]}", "config": doc})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


def fields(response) -> set[str]:
    body = response.json
    assert response.status_code == 400, body
    assert body["error"]["code"] == "validation_failed", body
    return {e["field"] for e in body["error"]["data"]["errors"]}


def leaked_to(fake) -> list:
    """Requests `fake` received that carried one of the stored secrets."""
    secrets = (GOOD_KEY, ENV_SECRET, RULE_SECRET)
    return [c for c in fake.calls
            if any(s in str(dict(c.headers)) + str(c.body) for s in secrets)]


def swapped(good, evil, field: str) -> dict:
    """The stored document with one address swapped for the attacker's, secrets masked."""
    swap = {"api_url": {"api_url": evil.api_url}, "proxy_url": {"proxy_url": evil.gateway_url},
            "sandbox_domain": {"sandbox_domain": "evil.test"}}[field]
    doc = e2b_doc(good, api_key="***", **swap)
    doc["env_vars"] = {"TOKEN": "***"}
    return doc


SWAPS = ("api_url", "proxy_url", "sandbox_domain")


@pytest.mark.parametrize("field", SWAPS)
def test_update_refuses_a_kept_key_with_a_swapped_address(admin_api, good, evil, field):
    config_id = stored(admin_api, e2b_doc(good))

    response = admin_api.put(f"{BASE}/{config_id}", json={
        "name": "x", "config": swapped(good, evil, field)})

    assert {"e2b.api_key", "env_vars.TOKEN"} <= fields(response)
    assert "re-enter" in response.get_data(as_text=True)
    assert db.session.get(SandboxConfig, config_id).config["e2b"]["api_url"] == good.api_url
    assert not leaked_to(evil)


@pytest.mark.parametrize("masked", ["***", "", None])
def test_empty_or_absent_key_is_refused_too_when_the_address_changes(admin_api, good, evil,
                                                                      masked):
    config_id = stored(admin_api, e2b_doc(good))
    doc = e2b_doc(good, api_url=evil.api_url, api_key=masked)
    if masked is None:
        del doc["e2b"]["api_key"]
    doc["env_vars"] = {"TOKEN": ENV_SECRET}  # typed again: only the key is kept

    assert fields(admin_api.put(f"{BASE}/{config_id}", json={"name": "x", "config": doc})) \
        == {"e2b.api_key"}


def test_a_new_address_with_the_secrets_typed_again_is_accepted(admin_api, good, evil):
    config_id = stored(admin_api, e2b_doc(good))
    doc = e2b_doc(good, api_url=evil.api_url, api_key="evil-key-0000")

    response = admin_api.put(f"{BASE}/{config_id}", json={"name": "x", "config": doc})

    assert response.status_code == 200, response.json
    assert db.session.get(SandboxConfig, config_id).config["e2b"]["api_key"] == "evil-key-0000"


def test_the_same_address_still_keeps_masked_secrets(admin_api, good):
    config_id = stored(admin_api, e2b_doc(good))
    doc = e2b_doc(good, api_key="***", http_timeout_sec=12)
    doc["env_vars"] = {"TOKEN": "***"}

    response = admin_api.put(f"{BASE}/{config_id}", json={"name": "x", "config": doc})

    assert response.status_code == 200, response.json
    kept = db.session.get(SandboxConfig, config_id).config
    assert kept["e2b"]["api_key"] == GOOD_KEY and kept["env_vars"]["TOKEN"] == ENV_SECRET


def test_switching_backend_does_not_carry_env_secrets(admin_api, good):
    config_id = stored(admin_api, e2b_doc(good))
    doc = {"sandbox_type": "docker", "docker": {"image": BASE_IMAGE},
           "env_vars": {"TOKEN": "***"}}

    assert fields(admin_api.put(f"{BASE}/{config_id}", json={"name": "x", "config": doc})) \
        == {"env_vars.TOKEN"}


@pytest.mark.parametrize("field", SWAPS)
def test_template_query_refuses_a_swapped_address(admin_api, good, evil, field):
    config_id = stored(admin_api, e2b_doc(good))

    response = admin_api.post(QUERY, json={"config_id": config_id,
                                           "config": swapped(good, evil, field)})

    assert "e2b.api_key" in fields(response)
    assert not leaked_to(evil)


@pytest.mark.parametrize("field", SWAPS)
def test_sandbox_check_refuses_a_swapped_address(admin_api, good, evil, field):
    config_id = stored(admin_api, e2b_doc(good))

    response = admin_api.post(CHECK, json={"config_id": config_id,
                                           "config": swapped(good, evil, field)})

    assert "e2b.api_key" in fields(response)
    assert not leaked_to(evil)


def test_a_capability_key_must_send_the_secret_with_an_inline_config(two_tenants, key_client,
                                                                     admin_api, good):
    a, _ = two_tenants
    config_id = stored(admin_api, e2b_doc(good))
    checker = key_client(a.tenant, "manage_vector_stores")
    inline = e2b_doc(good, api_key="***")

    refused = checker.post(CHECK, json={"config_id": config_id, "config": inline})
    typed = checker.post(CHECK, json={"config_id": config_id,
                                      "config": {**inline, "e2b": {**inline["e2b"],
                                                                   "api_key": GOOD_KEY}}})
    stored_only = checker.post(CHECK, json={"config_id": config_id})

    assert fields(refused) == {"e2b.api_key"}
    assert "may not reuse" in refused.get_data(as_text=True)
    assert typed.status_code == 200, typed.json
    assert stored_only.status_code == 200, stored_only.json
    assert stored_only.json["data"]["ok"] is True


def test_a_full_access_key_may_reuse_with_unchanged_endpoints(two_tenants, key_client,
                                                              admin_api, good):
    a, _ = two_tenants
    config_id = stored(admin_api, e2b_doc(good))
    full = key_client(a.tenant)

    response = full.post(CHECK, json={"config_id": config_id,
                                      "config": e2b_doc(good, api_key="***")})

    assert response.status_code == 200, response.json
    assert response.json["data"]["ok"] is True


# -- secrets inside network rules ---------------------------------------------------------------

def cube_doc(rule: dict) -> dict:
    return config_doc("cube", {"api_key": "k"}, network={"cube_rules": [rule]})


RULE = {"name": "api", "host": "api.example.com", "scheme": "https", "path": "/v1",
        "methods": ["GET"], "inject": [{"header": "Authorization", "secret": RULE_SECRET}]}


@pytest.mark.parametrize("change", [
    {"host": "evil.example.com"}, {"sni": "evil.example.com"}, {"scheme": "http"},
    {"path": "/"}, {"methods": ["GET", "POST"]},
], ids=["host", "sni", "scheme", "path", "methods"])
def test_a_cube_rule_secret_is_bound_to_the_rule_match(admin_api, change):
    config_id = stored(admin_api, cube_doc(RULE))
    rule = {**RULE, **change, "inject": [{"header": "Authorization", "secret": "***"}]}
    doc = cube_doc(rule)
    doc["cube"]["api_key"] = "***"

    response = admin_api.put(f"{BASE}/{config_id}", json={"name": "x", "config": doc})

    assert fields(response) == {"network.cube_rules[0].inject[0].secret"}
    rules = db.session.get(SandboxConfig, config_id).config["network"]["cube_rules"]
    assert rules[0]["host"] == "api.example.com"


def test_an_unchanged_cube_rule_keeps_its_secret(admin_api):
    config_id = stored(admin_api, cube_doc(RULE))
    doc = cube_doc({**RULE, "host": " API.example.com ",
                    "inject": [{"header": "Authorization", "secret": "***"}]})
    doc["cube"]["api_key"] = "***"

    response = admin_api.put(f"{BASE}/{config_id}", json={"name": "x", "config": doc})

    assert response.status_code == 200, response.json
    rules = db.session.get(SandboxConfig, config_id).config["network"]["cube_rules"]
    assert rules[0]["inject"][0]["secret"] == RULE_SECRET


def test_an_e2b_host_rule_header_is_bound_to_its_host(admin_api, good):
    doc = e2b_doc(good)
    doc["network"] = {"deny_egress_by_default": True,
                      "allow_out": ["api.example.com", "evil.example.com"],
                      "e2b_host_rules": [{"host": "api.example.com",
                                          "headers": {"X-Key": RULE_SECRET}}]}
    config_id = stored(admin_api, doc)
    doc = e2b_doc(good, api_key="***")
    doc["env_vars"] = {"TOKEN": "***"}
    doc["network"] = {"deny_egress_by_default": True,
                      "allow_out": ["api.example.com", "evil.example.com"],
                      "e2b_host_rules": [{"host": "evil.example.com",
                                          "headers": {"X-Key": "***"}}]}

    response = admin_api.put(f"{BASE}/{config_id}", json={"name": "x", "config": doc})

    assert fields(response) == {"network.e2b_host_rules[0].headers.X-Key"}
