"""Issue 14 items 3 and 7: config validation edges and `***` on create.

- Docker `network_mode` "" means the default (bridge), as the reference does.
- A `unix://` Docker engine (the operator's setting) must be an absolute socket path.
- `allow_private_endpoints` never opens link-local, metadata, unspecified or multicast
  targets, whatever its value and the operator's setting.
- A new config whose secret is the literal `***` (nothing stored) stores no secret.
"""

from __future__ import annotations

import pytest

from app.extensions import db
from app.models import SandboxConfig
from app.services.sandboxes.endpoints import EngineSettingError, parse_engines

pytestmark = pytest.mark.usefixtures("private_endpoints")
BASE = "/api/v1/sandbox-configs"


@pytest.fixture
def api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


def stored(config_id: str) -> dict:
    db.session.expire_all()
    return db.session.get(SandboxConfig, config_id).config


# -- item 3: network_mode "" -------------------------------------------------------------

def test_an_empty_network_mode_means_the_default(api):
    response = api.post(BASE, json={"name": "d", "config": {
        "sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:base",
                                             "network_mode": ""}}})
    assert response.status_code == 201, response.json
    assert response.json["data"]["config"]["docker"]["network_mode"] == "bridge"
    assert stored(response.json["data"]["id"])["docker"]["network_mode"] == "bridge"


@pytest.mark.parametrize("mode", ["host", "container:abc", " ", "Bridge"])
def test_other_network_modes_are_still_refused(api, mode):
    response = api.post(BASE, json={"name": "d", "config": {
        "sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:base",
                                             "network_mode": mode}}})
    assert response.status_code == 400
    assert [e["field"] for e in response.json["error"]["data"]["errors"]] == [
        "docker.network_mode"]


# -- item 3: unix:// engines are absolute ------------------------------------------------

@pytest.mark.parametrize("url", ["unix://", "unix://docker.sock", "unix://./docker.sock",
                                 "unix://var/run/docker.sock", "unix://~/docker.sock"])
def test_a_unix_engine_must_be_an_absolute_path(url):
    with pytest.raises(EngineSettingError, match="absolute"):
        parse_engines({"local": {"url": url}})


def test_a_tenant_cannot_name_a_docker_host_at_all(api):
    response = api.post(BASE, json={"name": "d", "config": {
        "sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:base",
                                             "host": "unix://docker.sock"}}})
    assert response.status_code == 400
    assert [e["field"] for e in response.json["error"]["data"]["errors"]] == ["docker.host"]


# -- item 3: never-reachable targets -------------------------------------------------------

NEVER = ["http://169.254.169.254/", "http://169.254.1.1:8080/", "http://[fe80::1]/",
         "http://[fd00:ec2::254]/", "http://0.0.0.0:3000/", "http://[::]/",
         "http://224.0.0.1/", "http://[ff02::1]/", "http://[::ffff:169.254.169.254]/"]


@pytest.mark.parametrize("allow", [True, False], ids=["flag-on", "flag-off"])
@pytest.mark.parametrize("url", NEVER)
@pytest.mark.parametrize("field", ["api_url", "proxy_url"])
def test_allow_private_endpoints_never_opens_metadata_link_local_unspecified_multicast(
        api, url, allow, field):
    block = {"api_url": "http://127.0.0.1:9", "proxy_url": "http://127.0.0.1:9",
             "sandbox_domain": "cube.test", "template_id": "t", "api_key": "k", field: url}
    response = api.post(BASE, json={"name": "c", "config": {
        "sandbox_type": "cube", "allow_private_endpoints": allow, "cube": block}})
    assert response.status_code == 400, response.json
    # (With the flag off the other, loopback URL is refused too, as private.)
    errors = [e for e in response.json["error"]["data"]["errors"]
              if e["field"] == f"cube.{field}"]
    assert len(errors) == 1 and "never reachable" in errors[0]["message"]
    assert "169.254" not in errors[0]["message"] and "fe80" not in errors[0]["message"]


# -- item 7: `***` on create ---------------------------------------------------------------

def test_masked_secrets_on_create_store_nothing(api):
    response = api.post(BASE, json={"name": "e", "config": {
        "sandbox_type": "e2b", "allow_private_endpoints": True,
        "e2b": {"api_key": "real-key", "template_id": "base", "api_url": "http://127.0.0.1:9"},
        "env_vars": {"MASKED": "***", "REAL": "value"},
        "network": {"allow_out": ["api.example.com"], "deny_egress_by_default": True,
                    "e2b_host_rules": [{"host": "api.example.com",
                                        "headers": {"X-Masked": "***", "X-Real": "h"}}]}}})
    assert response.status_code == 201, response.json
    shown = response.json["data"]["config"]
    assert shown["env_vars"] == {"MASKED": "", "REAL": "***"}
    assert shown["network"]["e2b_host_rules"][0]["headers"] == {"X-Masked": "", "X-Real": "***"}
    doc = stored(response.json["data"]["id"])
    assert doc["env_vars"] == {"MASKED": "", "REAL": "value"}
    assert doc["network"]["e2b_host_rules"][0]["headers"] == {"X-Masked": "", "X-Real": "h"}


def test_a_masked_cube_inject_secret_on_create_stores_nothing(api):
    response = api.post(BASE, json={"name": "c", "config": {
        "sandbox_type": "cube", "allow_private_endpoints": True,
        "cube": {"api_url": "http://127.0.0.1:9", "proxy_url": "http://127.0.0.1:9",
                 "sandbox_domain": "cube.test", "template_id": "t", "api_key": "***"},
        "network": {"cube_rules": [{"name": "r", "host": "api.example.com",
                                    "inject": [{"header": "Authorization", "secret": "***"}]}]}}})
    assert response.status_code == 201, response.json
    doc = stored(response.json["data"]["id"])
    assert doc["cube"]["api_key"] == ""
    assert doc["network"]["cube_rules"][0]["inject"][0]["secret"] == ""
    assert response.json["data"]["config"]["cube"]["api_key"] == ""


def test_a_required_api_key_sent_as_mask_on_create_is_missing(api):
    response = api.post(BASE, json={"name": "e", "config": {
        "sandbox_type": "e2b", "e2b": {"api_key": "***", "template_id": "base"}}})
    assert response.status_code == 400
    assert [e["field"] for e in response.json["error"]["data"]["errors"]] == ["e2b.api_key"]
