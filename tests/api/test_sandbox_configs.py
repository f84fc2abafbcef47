"""Sandbox config API: reference 3.1 with decisions 2, 5 and 10."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.models import AuditEvent, SandboxConfig
from tests.factories import config_doc

# Configs here point at loopback fakes: the operator allows private endpoints.
pytestmark = pytest.mark.usefixtures("private_endpoints")

E2B_KEY = "e2b_canary_key_5f1c"
BASE = "/api/v1/sandbox-configs"


def docker_doc(**overrides):
    return config_doc("docker", **overrides)


def e2b_doc(**overrides):
    return config_doc("e2b", {"api_key": E2B_KEY},
                      **{"env_vars": {"TOKEN": "env-secret-1", "PLAIN": "x"}, **overrides})


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


def create(api, name="main", config=None, **extra):
    response = api.post(BASE, json={"name": name, "config": config or docker_doc(), **extra})
    assert response.status_code == 201, response.json
    return response.json["data"]


def audit_count() -> int:
    return db.session.scalar(select(func.count()).select_from(AuditEvent))


def test_create_returns_201_and_masks_every_secret(admin_api):
    data = create(admin_api, config=e2b_doc())
    assert data["sandbox_type"] == "e2b"
    assert data["config"]["e2b"]["api_key"] == "***"
    assert data["config"]["env_vars"] == {"TOKEN": "***", "PLAIN": "***"}
    body = admin_api.get(f"{BASE}/{data['id']}").get_data(as_text=True)
    assert E2B_KEY not in body and "env-secret-1" not in body


def test_secrets_are_encrypted_at_rest(admin_api):
    data = create(admin_api, config=e2b_doc())
    raw = db.session.execute(
        select(SandboxConfig.__table__.c.config.cast(db.Text)).where(SandboxConfig.id == data["id"])
    ).scalar_one()
    # Each secret is sealed on its own (issue 14 item 5: a lost key blanks only the
    # secrets); the rest of the document is stored readable.
    assert E2B_KEY not in raw and "env-secret-1" not in raw and '"x"' not in raw
    stored = json.loads(raw)
    for token in (stored["e2b"]["api_key"], *stored["env_vars"].values()):
        assert token.startswith("gAAAAA")


def test_list_has_kill_switch_sibling_and_only_live_rows(admin_api):
    first = create(admin_api, "one")
    create(admin_api, "two")
    assert admin_api.delete(f"{BASE}/{first['id']}").status_code in (200, 409)
    listing = admin_api.get(BASE).json
    assert listing["workspace_scripts_disabled"] is False
    assert "two" in [c["name"] for c in listing["data"]]


def test_duplicate_name_is_409_conflict_and_writes_nothing(admin_api):
    create(admin_api, "dup")
    before = audit_count()
    response = admin_api.post(BASE, json={"name": "dup", "config": docker_doc()})
    assert response.status_code == 409
    assert response.json["error"]["code"] == "conflict"
    assert audit_count() == before


def test_validation_reports_every_field_at_once(admin_api):
    bad = {"sandbox_type": "e2b", "terminal_idle_disconnect_sec": 59, "skill_rollout": "later",
           "e2b": {"template_id": ""},
           "network": {"allow_out": ["ok.example.com", "bad domain", "::1"], "deny_out": ["x.com"]}}
    response = admin_api.post(BASE, json={"name": "", "config": bad})
    assert response.status_code == 400
    error = response.json["error"]
    assert error["code"] == "validation_failed"
    fields = {e["field"] for e in error["data"]["errors"]}
    assert {"name", "terminal_idle_disconnect_sec", "skill_rollout", "e2b.api_key",
            "e2b.template_id", "network.allow_out[1]", "network.allow_out[2]",
            "network.deny_out[0]"} <= fields
    assert db.session.scalar(select(func.count()).select_from(SandboxConfig)) == 0


def test_docker_accepts_allow_and_deny_lists_but_not_provider_rules(admin_api):
    net = {"deny_egress_by_default": True, "allow_out": ["*.pypi.org", "10.1.2.3/8"],
           "deny_out": ["192.0.2.1"]}
    data = create(admin_api, config=docker_doc(network=net))
    assert data["config"]["network"]["allow_out"] == ["*.pypi.org", "10.1.2.3/8"]
    rules = {"cube_rules": [{"name": "r", "host": "a.example.com"}]}
    response = admin_api.post(BASE, json={"name": "x", "config": docker_doc(network=rules)})
    assert response.json["error"]["data"]["errors"][0]["field"] == "network.cube_rules"


def test_update_keeps_masked_secrets_and_drops_absent_env_keys(admin_api):
    data = create(admin_api, config=e2b_doc())
    config = data["config"]
    config["env_vars"] = {"TOKEN": "***", "NEW": "fresh"}  # PLAIN removed
    response = admin_api.put(f"{BASE}/{data['id']}", json={"name": "main", "config": config})
    assert response.status_code == 200, response.json
    row = db.session.get(SandboxConfig, data["id"])
    db.session.refresh(row)
    assert row.config["e2b"]["api_key"] == E2B_KEY
    assert row.config["env_vars"] == {"TOKEN": "env-secret-1", "NEW": "fresh"}


def test_update_ignores_server_owned_fields(admin_api):
    data = create(admin_api)
    config = dict(data["config"], skill_image={"snapshot_id": "forged"},
                  volume_mount={"enabled": True})
    response = admin_api.put(f"{BASE}/{data['id']}", json={"name": "main", "config": config})
    assert response.status_code == 200
    stored = db.session.get(SandboxConfig, data["id"]).config
    assert stored.get("skill_image") is None and stored.get("volume_mount") is None


def test_snapshot_blocks_template_change(admin_api):
    data = create(admin_api)
    row = db.session.get(SandboxConfig, data["id"])
    row.config = {**row.config, "skill_image": {"snapshot_id": "snap-1", "generation": 1}}
    db.session.commit()
    config = docker_doc(docker={"image": "sandlot/sandbox:other"})
    response = admin_api.put(f"{BASE}/{data['id']}", json={"name": "main", "config": config})
    assert response.status_code == 409
    assert response.json["error"]["code"] == "skill_snapshot_blocks_template"
    same = docker_doc(default_timeout_sec=120)
    assert admin_api.put(f"{BASE}/{data['id']}",
                         json={"name": "main", "config": same}).status_code == 200


def test_cordoned_config_refuses_mutations_with_423(admin_api):
    data = create(admin_api)
    row = db.session.get(SandboxConfig, data["id"])
    from app.models.types import utcnow

    row.cordoned_at = utcnow()
    db.session.commit()
    response = admin_api.put(f"{BASE}/{data['id']}", json={"name": "n", "config": docker_doc()})
    assert response.status_code == 423
    assert response.json["error"]["code"] == "sandbox_config_cordoned"
    assert admin_api.delete(f"{BASE}/{data['id']}").status_code == 423


def test_expired_cordon_lease_counts_as_free(admin_api):
    from datetime import timedelta

    from app.models.types import utcnow

    data = create(admin_api)
    row = db.session.get(SandboxConfig, data["id"])
    row.cordoned_at = utcnow() - timedelta(minutes=3)
    db.session.commit()
    response = admin_api.put(f"{BASE}/{data['id']}",
                             json={"name": "n", "config": docker_doc(default_timeout_sec=5)})
    assert response.status_code == 200


def test_workspace_policy_toggles_kill_switch(admin_api):
    response = admin_api.put(f"{BASE}/workspace-policy", json={"scripts_disabled": True})
    assert response.json == {"success": True, "data": None, "workspace_scripts_disabled": True}
    assert admin_api.get(BASE).json["workspace_scripts_disabled"] is True
    response = admin_api.put(f"{BASE}/workspace-policy", json={"scripts_disabled": False})
    assert response.json["workspace_scripts_disabled"] is False


def test_viewer_reads_masked_but_cannot_write(two_tenants, bearer, admin_api):
    a, _ = two_tenants
    data = create(admin_api, config=e2b_doc())
    viewer = bearer(a.viewer, a.tenant)
    assert viewer.get(f"{BASE}/{data['id']}").json["data"]["config"]["e2b"]["api_key"] == "***"
    assert viewer.post(BASE, json={"name": "v", "config": docker_doc()}).status_code == 403
    assert viewer.get(f"{BASE}/{data['id']}/sandboxes").status_code == 403


def test_foreign_and_deleted_ids_are_404(two_tenants, bearer, admin_api):
    _, b = two_tenants
    data = create(admin_api)
    other = bearer(b.admin, b.tenant)
    assert other.get(f"{BASE}/{data['id']}").status_code == 404
    assert other.put(f"{BASE}/{data['id']}",
                     json={"name": "x", "config": docker_doc()}).status_code == 404
    assert other.delete(f"{BASE}/{data['id']}").status_code == 404
    row = db.session.get(SandboxConfig, data["id"])
    from app.models.types import utcnow

    row.deleted_at = utcnow()
    db.session.commit()
    assert admin_api.get(f"{BASE}/{data['id']}").status_code == 404


def test_api_key_needs_full_access(two_tenants, key_client):
    a, _ = two_tenants
    capability_key = key_client(a.tenant, "manage_vector_stores")
    assert capability_key.get(BASE).status_code == 403
    assert key_client(a.tenant).get(BASE).status_code == 200


def test_nul_in_name_or_description_is_a_field_error(admin_api):
    response = admin_api.post(BASE, json={"name": "a\u0000b", "description": "x\u0000",
                                          "config": docker_doc()})
    assert response.status_code == 400
    fields = {e["field"] for e in response.json["error"]["data"]["errors"]}
    assert fields == {"name", "description"}


def test_templates_query_lists_without_a_chosen_template(admin_api):
    response = admin_api.post(f"{BASE}/templates/query", json={"config": {
        "sandbox_type": "docker", "docker": {"engine": "missing"}}})
    assert response.status_code == 503  # reached the (absent) engine: the doc was accepted
    assert response.json["error"]["code"] == "unavailable"
    assert "/tmp/" not in response.json["error"]["message"]  # the operator's socket path


def test_templates_query_needs_config_or_id(admin_api):
    response = admin_api.post(f"{BASE}/templates/query", json={})
    assert response.json["error"]["data"]["errors"][0]["field"] == "config"
    replace = admin_api.post(f"{BASE}/templates/query",
                             json={"config": docker_doc(), "replace_standard": True})
    assert replace.json["error"]["data"]["errors"][0]["field"] == "config_id"
