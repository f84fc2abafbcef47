"""Issue 24 item 4 through the API: `POST /sandbox-configs/:id/network/explain` for a
stored config (anyone who may read it), and `POST /sandbox-configs/network/explain` for
an unsaved one (admins, as the editor asks it)."""

from __future__ import annotations

from app.services import audit
from app.services.sandboxes import configs as service
from tests.factories import config_doc

BASE = "/api/v1/sandbox-configs"
POLICY = {"deny_egress_by_default": True, "allow_out": ["*.pypi.org", "10.1.0.0/16"]}


def stored(tenant):
    return service.create_config(tenant, audit.SystemActor("tests"), "Policed", "",
                                 config_doc("e2b", network=POLICY))


def test_a_stored_configs_verdicts(app, two_tenants, bearer, monkeypatch):
    monkeypatch.setenv("SANDBOX_DNS_UPSTREAM", "127.0.0.1:9")  # nothing resolves
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)  # its fake URL
    a, b = two_tenants
    config = stored(a.tenant)
    viewer = bearer(a.viewer, a.tenant)
    answer = viewer.post(f"{BASE}/{config.id}/network/explain",
                         json={"host": "files.pypi.org", "port": 443})
    assert answer.status_code == 200, answer.json
    data = answer.json["data"]
    assert (data["verdict"], data["rule"], data["backend"]) == (
        "allowed", "allow_out[0] *.pypi.org", "e2b")
    assert data["port"] == 443 and "own network" in data["note"]
    denied = viewer.post(f"{BASE}/{config.id}/network/explain", json={"host": "pypi.org"})
    assert (denied.json["data"]["verdict"], denied.json["data"]["rule"]) == (
        "denied", "default deny")
    # another workspace's config is not found, and says nothing of its policy
    foreign = bearer(b.admin, b.tenant).post(f"{BASE}/{config.id}/network/explain",
                                             json={"host": "pypi.org"})
    assert foreign.status_code == 404 and "pypi" not in foreign.get_data(as_text=True)


def test_an_unsaved_config_is_explained_for_admins(two_tenants, bearer):
    a, _ = two_tenants
    body = {"host": "10.1.2.3", "config": {"sandbox_type": "docker", "network": POLICY}}
    answer = bearer(a.admin, a.tenant).post(f"{BASE}/network/explain", json=body)
    assert answer.status_code == 200, answer.json
    assert answer.json["data"]["rule"] == "allow_out[1] 10.1.0.0/16"
    refused = bearer(a.viewer, a.tenant).post(f"{BASE}/network/explain", json=body)
    assert refused.status_code == 403


def test_bad_input_is_a_field_error_in_the_envelope(app, two_tenants, bearer, monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    config = stored(a.tenant)
    for body, field in (({"host": "bad host"}, "host"), ({"host": "pypi.org", "port": 0}, "port"),
                        ({"host": "pypi.org", "extra": 1}, "extra")):
        answer = admin.post(f"{BASE}/{config.id}/network/explain", json=body)
        assert answer.status_code == 400, answer.json
        assert answer.json["error"]["code"] == "validation_failed"
        assert [e["field"] for e in answer.json["error"]["data"]["errors"]] == [field]
    unsaved = admin.post(f"{BASE}/network/explain", json={"host": "pypi.org", "config": {
        "sandbox_type": "docker", "network": {"allow_out": ["pypi.org"]}}})
    assert unsaved.status_code == 400
    assert unsaved.json["error"]["data"]["errors"][0]["field"] == "config.network.allow_out"
