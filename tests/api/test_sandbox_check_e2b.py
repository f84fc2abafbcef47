"""The sandbox check on an E2B config, against the local fake E2B server (the real SDK over
loopback): a masked API key in the unsaved form keeps the stored one, a wrong key is
"credentials rejected", the template comes from the catalog, and a deep check creates
and deletes a real sandbox through the provider's API."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from app.extensions import db
from app.models import Job
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, require_docker
from tests.factories import config_doc

# Configs here point at loopback fakes: the operator allows private endpoints.
pytestmark = pytest.mark.usefixtures("private_endpoints")

URL = "/api/v1/system/sandbox-check"


@pytest.fixture(scope="module")
def fake() -> Iterator[object]:
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer("e2b", image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}chk").start()
    yield server
    server.stop()


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


def e2b_doc(fake, **block) -> dict:
    settings = {k: v for k, v in fake.settings().items() if k != "allow_private_endpoints"}
    return config_doc("e2b", {**settings, **block})


def rows(data: dict) -> dict[str, dict]:
    return {row["name"]: row for row in data["checks"]}


def stored_config(api, fake) -> str:
    response = api.post("/api/v1/sandbox-configs", json={
        "name": f"e2b-{uuid.uuid4().hex[:6]}", "config": e2b_doc(fake)})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


def test_masked_key_keeps_the_stored_one_and_a_wrong_key_is_rejected(admin_api, fake):
    config_id = stored_config(admin_api, fake)

    kept = admin_api.post(URL, json={"config_id": config_id,
                                     "config": e2b_doc(fake, api_key="***")})
    wrong = admin_api.post(URL, json={"config_id": config_id,
                                      "config": e2b_doc(fake, api_key="not-the-key-123")})

    assert kept.status_code == 200 and wrong.status_code == 200
    good = rows(kept.json["data"])
    assert good["api_url_reachable"]["ok"] and good["credential_valid"]["ok"]
    assert good["template_exists"] == {**good["template_exists"], "ok": True, "message":
                                       f"Template {fake.template_id} is in the catalog and ready."}
    assert kept.json["data"]["ok"] is True
    assert kept.json["data"]["capabilities"]["supports_pause_resume"] is True
    bad = rows(wrong.json["data"])
    assert bad["api_url_reachable"]["ok"] is True  # it answered, and refused the key
    assert bad["credential_valid"]["ok"] is False
    assert bad["credential_valid"]["message"].startswith("Credentials rejected")
    assert bad["template_exists"]["reason"] == "credentials_rejected"
    job = db.session.get(Job, wrong.json["data"]["job_id"])
    assert "not-the-key-123" not in str(job.params) + str(job.result) + job.log
    assert fake.api_key not in wrong.get_data(as_text=True) + job.log


def test_an_unknown_template_fails_the_template_row(admin_api, fake):
    data = admin_api.post(URL, json={"config": e2b_doc(fake, template_id="no-such")}).json["data"]

    row = rows(data)["template_exists"]
    assert row["ok"] is False
    assert row["message"] == "Template no-such is not in the catalog: build it or pick another."


def test_deep_check_through_the_provider_api(admin_api, fake):
    data = admin_api.post(URL, json={"config": e2b_doc(fake), "deep": True}).json["data"]

    by_name = rows(data)
    assert by_name["sandbox_exec"]["ok"] is True, by_name["sandbox_exec"]
    # The fake's sandboxes have no network at all: the (loopback) probe cannot answer.
    assert by_name["egress_available"]["ok"] is False
    assert "No probe target answered (127.0.0.1:9:" in by_name["egress_available"]["message"]
    assert fake.creates[-1].body["metadata"]["sandlot_purpose"] == "check"
    assert not [s for s in fake.sandboxes.values() if s.metadata.get("sandlot_purpose") == "check"]
