"""POST /api/v1/system/sandbox-check against the real Docker engine (reference 5, guard 2.3,
decisions 2 and 6): the rows in order with their skip reasons, unsaved values merged over
the stored config, the deep check's real sandbox (always deleted), egress probes against a
private test internet, the egress canary, and no secret on the job row."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from app.backends.base import SandboxState
from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.models import Job, SandboxConfig
from app.services.sandboxes.check import job as sandbox_check
from tests.api import check_world
from tests.api.check_world import DENIED, DENIED_URL, DOWN_NAME, OPEN, OPEN_NAME
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, require_docker
from tests.factories import config_doc
from tests.sweeps import routes

URL = "/api/v1/system/sandbox-check"
CONFIGS = "/api/v1/sandbox-configs"
NO_ENGINE = "unix:///tmp/sandlot-no-engine.sock"
SHALLOW = ["api_url_reachable", "credential_valid", "template_exists", "sandbox_exec",
           "egress_available"]


@pytest.fixture(autouse=True)
def _engine():
    require_docker()


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


@pytest.fixture
def probe_world(app, tmp_path):
    """The private internet, and the check's probe URLs pointed into it."""
    with check_world.probing(app, tmp_path):
        yield


def docker_doc(image: str = BASE_IMAGE, engine: str = "", **extra) -> dict:
    return config_doc("docker", {"image": image, "engine": engine, "http_timeout_sec": 10},
                      **extra)


def create(api, doc: dict | None = None) -> dict:
    response = api.post(CONFIGS, json={"name": f"cfg-{uuid.uuid4().hex[:6]}",
                                       "config": doc or docker_doc()})
    assert response.status_code == 201, response.json
    return response.json["data"]


def run(api, **body) -> dict:
    """The check's answer; one that outlasts the request's few seconds of waiting (a deep
    check on a busy machine) answers 202 and is read from its job, as a client does."""
    response = api.post(URL, json=body)
    assert response.status_code in (200, 202), response.json
    assert response.json["success"] is True
    data = response.json["data"]
    deadline = time.monotonic() + 120
    while data["status"] != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.2)
        job = api.get(f"/api/v1/jobs/{data['job_id']}").json["data"]
        if job["status"] == "succeeded":
            data = {**job["result"], "job_id": job["id"], "status": "succeeded"}
        assert job["status"] in ("pending", "running", "succeeded"), job
    return data


def rows(data: dict) -> dict[str, dict]:
    return {row["name"]: row for row in data["checks"]}


def check_sandboxes(tenant_id: int, config_id: str) -> list:
    """The check sandboxes of one config (another test process on the same engine has its
    own tenant 1, so the tenant alone does not tell whose they are)."""
    backend = DockerBackend({"host": DOCKER_HOST})
    try:
        return backend.list({"sandlot_tenant_id": str(tenant_id), "sandlot_purpose": "check",
                             "sandlot_sandbox_config_id": config_id},
                            states=frozenset(SandboxState))
    finally:
        backend.close()


# -- shallow ------------------------------------------------------------------------------

def test_shallow_check_of_a_good_docker_config(admin_api):
    config = create(admin_api)

    data = run(admin_api, config_id=config["id"])

    assert [row["name"] for row in data["checks"]] == SHALLOW
    by_name = rows(data)
    for name in SHALLOW[:3]:
        assert by_name[name]["ok"] is True, by_name[name]
        assert by_name[name]["reason"] == ""
    assert "answered" in by_name["api_url_reachable"]["message"]
    assert by_name["template_exists"]["message"] == f"Image {BASE_IMAGE} is on the engine."
    # Issue 27 item 10: a local engine takes no credentials, and the row says so.
    assert by_name["credential_valid"]["message"] == (
        "The engine listed its containers; a local engine needs no credentials.")
    for name in SHALLOW[3:]:
        assert by_name[name]["ok"] is None
        assert by_name[name]["reason"] == "needs_deep_check"
    assert data["ok"] is True and data["provider"] == "docker" and data["deep"] is False
    caps = data["capabilities"]
    assert {"supports_volumes", "supports_pause_resume", "supports_reconnect"} <= set(caps)
    assert caps["supports_pause_resume"] is True and caps["supports_volumes"] is False
    job = admin_api.get(f"/api/v1/jobs/{data['job_id']}").json["data"]
    assert job["kind"] == "sandbox_check" and job["status"] == "succeeded"
    assert job["result"]["checks"] == data["checks"]
    assert "template_exists: ok" in job["log"]


def test_a_missing_image_fails_only_the_template_row(admin_api):
    data = run(admin_api, config=docker_doc(image="sandlot/sandbox:does-not-exist"))

    by_name = rows(data)
    assert by_name["api_url_reachable"]["ok"] and by_name["credential_valid"]["ok"]
    assert by_name["template_exists"]["ok"] is False
    assert "sandlot/sandbox:does-not-exist not found" in by_name["template_exists"]["message"]
    assert data["ok"] is False


def test_a_shallow_check_needs_no_image_yet(admin_api):
    data = run(admin_api, config={"sandbox_type": "docker", "docker": {}})

    row = rows(data)["template_exists"]
    assert row["ok"] is None and row["reason"] == "template_not_set"
    assert data["ok"] is True


def test_unsaved_values_are_merged_over_the_stored_config(two_tenants, admin_api):
    secret = f"stored-{uuid.uuid4().hex}"
    config = create(admin_api, docker_doc(env_vars={"TOKEN": secret}))
    stored = db.session.get(SandboxConfig, config["id"])
    unsaved = docker_doc(image="sandlot/sandbox:busybox", env_vars={"TOKEN": "***"})

    doc = sandbox_check.prepare(stored, unsaved, deep=True)
    assert doc["env_vars"] == {"TOKEN": secret}  # the masked secret keeps the stored one
    assert doc["docker"]["image"] == "sandlot/sandbox:busybox"  # the form's value wins

    data = run(admin_api, config_id=config["id"], config=unsaved)
    assert rows(data)["template_exists"]["message"] == \
        "Image sandlot/sandbox:busybox is on the engine."
    blank = sandbox_check.prepare(stored, docker_doc(env_vars={"TOKEN": ""}), deep=False)
    assert blank["env_vars"] == {"TOKEN": secret}
    typed = sandbox_check.prepare(stored, docker_doc(env_vars={"TOKEN": "new"}), deep=False)
    assert typed["env_vars"] == {"TOKEN": "new"}


def test_an_invalid_config_is_a_validation_failed_envelope(admin_api):
    response = admin_api.post(URL, json={"config": docker_doc(
        image="", network={"deny_out": ["example.com"]}), "deep": True})

    assert response.status_code == 400
    body = response.json
    assert body["success"] is False and body["error"]["code"] == "validation_failed"
    fields = {e["field"] for e in body["error"]["data"]["errors"]}
    assert {"docker.image", "network.deny_out[0]"} <= fields
    assert "code" not in body and "msg" not in body  # never the reference's {code:1,msg}
    nothing = admin_api.post(URL, json={})
    assert nothing.status_code == 400
    assert nothing.json["error"]["code"] == "validation_failed"
    assert db.session.query(Job).count() == 0  # refused before any job exists


def test_a_foreign_or_unknown_config_id_is_404(two_tenants, admin_api, bearer):
    _, b = two_tenants
    foreign = create(bearer(b.admin, b.tenant))
    for config_id in (foreign["id"], str(uuid.uuid4()), "not-a-uuid"):
        response = admin_api.post(URL, json={"config_id": config_id})
        assert response.status_code == 404, config_id
        assert response.json["error"]["code"] == "not_found"


def test_guard_admin_or_a_manage_vector_stores_key(app, two_tenants, bearer, key_client):
    a, _ = two_tenants
    body = {"config": docker_doc()}
    for user in (a.viewer, a.contributor):
        response = bearer(user, a.tenant).post(URL, json=body)
        assert response.status_code == 403
        assert response.json["error"]["code"] == "forbidden"
    assert key_client(a.tenant, "manage_vector_stores").post(URL, json=body).status_code == 200
    assert key_client(a.tenant).post(URL, json=body).status_code == 200  # full access
    bare = routes.make_key_of_kind(app, a.tenant, "bare")
    response = app.test_client().post(URL, json=body, headers={"X-API-Key": bare})
    assert response.status_code == 403
    assert app.test_client().post(URL, json=body).status_code == 401
    assert bearer(a.owner, a.tenant).post(URL, json=body).status_code == 200


def test_no_secret_reaches_the_job_row_or_the_response(admin_api):
    stored_secret = f"storedCnry{uuid.uuid4().hex}"
    typed_secret = f"typedCnry{uuid.uuid4().hex}"
    config = create(admin_api, docker_doc(env_vars={"TOKEN": stored_secret}))
    unsaved = docker_doc(env_vars={"TOKEN": "***", "TYPED": typed_secret})

    response = admin_api.post(URL, json={"config_id": config["id"], "config": unsaved})

    assert response.status_code == 200
    job = db.session.get(Job, response.json["data"]["job_id"])
    row_text = json.dumps([job.params, job.result, job.log, job.error, job.stage])
    for secret in (stored_secret, typed_secret):
        assert secret not in row_text
        assert secret not in response.get_data(as_text=True)
        assert secret not in admin_api.get(f"/api/v1/jobs/{job.id}").get_data(as_text=True)
    # The unsaved values are on the row only sealed, and come back intact for the job.
    assert sandbox_check.unseal(job.params["sealed_config"]) == unsaved
    assert job.params["config_id"] == config["id"]


# -- deep -----------------------------------------------------------------------------------

def test_deep_check_with_the_engine_unreachable(admin_api):
    data = run(admin_api, config=docker_doc(engine="missing"), deep=True)

    assert [row["name"] for row in data["checks"]] == SHALLOW
    by_name = rows(data)
    api = by_name["api_url_reachable"]
    assert api["ok"] is False
    assert api["message"].startswith("The Docker engine “missing” could not be reached")
    assert "(reference " in api["message"] and NO_ENGINE.removeprefix("unix://") not in str(data)
    for name in SHALLOW[1:]:
        assert by_name[name]["ok"] is None, by_name[name]
        assert by_name[name]["reason"] == "control_plane_unreachable"
    assert data["ok"] is False


def test_deep_check_passes_and_leaves_no_sandbox_behind(two_tenants, admin_api, probe_world):
    a, _ = two_tenants
    config = create(admin_api)

    data = run(admin_api, config_id=config["id"], deep=True)

    assert [row["name"] for row in data["checks"]] == SHALLOW
    by_name = rows(data)
    assert all(row["ok"] is True for row in data["checks"]), data["checks"]
    assert "ran `echo sandlot-ok`" in by_name["sandbox_exec"]["message"]
    assert by_name["egress_available"]["message"] == f"Reachable via {DENIED}:8080."
    assert data["ok"] is True and data["deep"] is True
    assert check_sandboxes(a.tenant.id, config["id"]) == []
    log = db.session.get(Job, data["job_id"]).log
    assert "sandbox_exec: ok" in log and "egress_available: ok" in log


def test_deny_by_default_reports_restricted_and_the_canary_holds(admin_api, probe_world):
    config = create(admin_api, docker_doc(network={"deny_egress_by_default": True}))

    data = run(admin_api, config_id=config["id"], deep=True)

    assert [row["name"] for row in data["checks"]] == [*SHALLOW, "egress_denied_enforced"]
    by_name = rows(data)
    egress = by_name["egress_available"]
    assert egress["ok"] is None and egress["reason"] == "egress_restricted_by_policy"
    # Issue 27 item 4: the advice names what is missing, by the form's label.
    assert egress["message"] == (
        "Restricted by policy: this config denies egress by default and its Allowed "
        f"destinations name no host to try. To let sandboxes reach {DENIED} and {OPEN}, "
        "add them to Allowed destinations.")
    assert [(t["host"], t["allowed"], t["reachable"]) for t in egress["targets"]] == [
        (f"{DENIED}:8080", False, False), (f"{OPEN}:8080", False, False)]
    canary = by_name["egress_denied_enforced"]
    assert canary["ok"] is True, canary
    assert f"{DENIED}:8080 is denied by the policy and blocked" in canary["message"]
    assert data["ok"] is True  # restricted is not failed


def test_allowlisted_egress_works_and_the_denied_target_stays_blocked(admin_api, probe_world):
    """Deny by default with the open target allowed, and the deny_out form: both reach
    OPEN, and the canary probes DENIED, which the policy denies."""
    for network in ({"deny_egress_by_default": True, "allow_out": [OPEN]},
                    {"deny_out": [DENIED]}):
        config = create(admin_api, docker_doc(network=network))

        data = run(admin_api, config_id=config["id"], deep=True)

        by_name = rows(data)
        assert by_name["egress_available"]["ok"] is True, (network, data["checks"])
        assert by_name["egress_available"]["message"] == f"Reachable via {OPEN}:8080."
        canary = by_name["egress_denied_enforced"]
        assert canary["ok"] is True and DENIED in canary["message"], canary
        assert data["ok"] is True


def test_the_allowed_destinations_are_probed_each_with_its_answer(admin_api, probe_world):
    """Issue 27 item 4: deny by default with three allowed names (and a wildcard, which
    names no host to try): each name is probed and shown reachable or not, in its own
    case; one that does not answer is a warning, while the denied target stays blocked."""
    allow = [OPEN_NAME, "*.wild.example", DOWN_NAME, OPEN]
    config = create(admin_api, docker_doc(network={"deny_egress_by_default": True,
                                                   "allow_out": allow}))

    data = run(admin_api, config_id=config["id"], deep=True)

    egress = rows(data)["egress_available"]
    assert egress["ok"] is True and egress["reason"] == "", egress
    down = egress["targets"][1]["detail"]  # refused upstream: how the gateway relays it
    assert egress["message"] == (
        f"Reachable via {OPEN_NAME}. Allowed but not reachable: {DOWN_NAME} ({down}): check "
        "the name, and that it answers HTTPS.")
    assert [(t["host"], t["allowed"], t["reachable"]) for t in egress["targets"]] == [
        (OPEN_NAME, True, True), (DOWN_NAME, True, False),  # the names, as written
        (f"{DENIED}:8080", False, False), (f"{OPEN}:8080", True, True)]  # the probe URLs
    assert egress["targets"][0]["detail"] == "HTTP 200" and "HTTP" not in down
    canary = rows(data)["egress_denied_enforced"]
    assert canary["ok"] is True and DENIED in canary["message"], canary
    assert data["ok"] is True


def test_an_allowed_destination_that_never_answers_fails_the_check(app, admin_api,
                                                                    probe_world):
    """The issue's case: deny by default, one allowed name, unreachable. The check fails
    (it said "Passed"), and its advice never suggests what the policy already allows."""
    app.config["SANDBOX_EGRESS_PROBE_URLS"] = f"https://{DOWN_NAME}/,{DENIED_URL}"
    config = create(admin_api, docker_doc(network={"deny_egress_by_default": True,
                                                   "allow_out": [DOWN_NAME]}))

    data = run(admin_api, config_id=config["id"], deep=True)

    egress = rows(data)["egress_available"]
    assert egress["ok"] is False and data["ok"] is False
    down = egress["targets"][0]["detail"]
    assert egress["message"] == (
        f"No allowed destination answered: {DOWN_NAME} ({down}). Check each name, and that "
        "it answers HTTPS.")
    assert [(t["host"], t["allowed"], t["reachable"]) for t in egress["targets"]] == [
        (DOWN_NAME, True, False), (f"{DENIED}:8080", False, False)]
    assert "allow_out" not in str(data)


def test_shallow_check_lists_the_canary_as_needing_a_deep_check(admin_api):
    data = run(admin_api, config=docker_doc(network={"deny_out": ["203.0.113.7"]}))

    canary = rows(data)["egress_denied_enforced"]
    assert canary["ok"] is None and canary["reason"] == "needs_deep_check"


def test_a_sandbox_that_cannot_be_created_skips_the_egress_rows(admin_api, monkeypatch):
    def refuse(self, spec):
        from app.backends.base import QuotaExceeded

        raise QuotaExceeded("at most 0 sandboxes")

    monkeypatch.setattr(DockerBackend, "create", refuse)
    data = run(admin_api, config=docker_doc(), deep=True)

    by_name = rows(data)
    assert by_name["sandbox_exec"]["ok"] is False
    assert by_name["sandbox_exec"]["message"] == (
        "Could not create a sandbox: Capacity or quota exhausted: at most 0 sandboxes")
    assert by_name["egress_available"]["reason"] == "sandbox_not_created"


def test_the_budget_bounds_a_hanging_provider(monkeypatch):
    """A provider that never answers costs one failed row within the budget."""
    import threading

    stop = threading.Event()
    monkeypatch.setattr(DockerBackend, "list", lambda self, *a, **k: stop.wait(30))
    try:
        result = sandbox_check.check(docker_doc(), deep=True, probe_urls=[], budget_sec=2,
                                     metadata={"sandlot_tenant_id": "0"})
    finally:
        stop.set()
    by_name = rows(result)
    assert by_name["credential_valid"]["ok"] is False
    assert "budget ran out" in by_name["credential_valid"]["message"]
    assert by_name["template_exists"]["reason"] == "check_budget_exhausted"


def test_the_canary_fails_when_a_denied_target_is_reachable(admin_api, probe_world,
                                                             monkeypatch):
    """Control: the same check with the policy left out of the sandbox it creates (as a
    provider that ignores it would) reports the breach instead of passing."""
    import dataclasses

    from app.backends.base import ResolvedNetworkPolicy
    from app.services.sandboxes import document

    original = document.spec_for

    def unenforced(doc, metadata, timeout_sec=None):
        spec = original(doc, metadata, timeout_sec)
        return dataclasses.replace(spec, network=ResolvedNetworkPolicy())

    monkeypatch.setattr(document, "spec_for", unenforced)
    config = create(admin_api, docker_doc(network={"deny_out": [DENIED]}))

    data = run(admin_api, config_id=config["id"], deep=True)

    canary = rows(data)["egress_denied_enforced"]
    assert canary["ok"] is False, canary
    assert canary["message"] == (f"The policy denies {DENIED}:8080, but the sandbox reached "
                                 "it (HTTP 200).")
    assert data["ok"] is False


def test_a_client_that_cannot_be_built_is_the_only_row(app, admin_api, tmp_path, monkeypatch,
                                                       caplog):
    certs = tmp_path / "no-certs"
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", {
        "local": {"url": DOCKER_HOST},
        "remote": {"url": "tcp://127.0.0.1:9", "tls_dir": str(certs)}})
    # Without network: an engine on another host takes no other (issue 28).
    data = run(admin_api, config=docker_doc(engine="remote",
                                            network={"deny_egress_by_default": True}))

    [row] = data["checks"]
    assert row["name"] == "client_build" and row["ok"] is False
    assert row["message"].startswith("Credentials rejected: the Docker engine refused this "
                                     "server's TLS client certificate; tell the operator")
    # The operator's path and address stay in the operator's log, under the reference.
    assert str(certs) not in str(data) and "127.0.0.1" not in str(data)
    reference = re.search(r"reference ([0-9a-f]{8})", row["message"]).group(1)
    assert any(reference in r.getMessage() and str(certs) in r.getMessage()
               for r in caplog.records)
    assert data["ok"] is False


def test_a_check_that_outlasts_the_wait_answers_202_and_is_polled(app, admin_api, monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_CHECK_WAIT_SECONDS", 0)
    response = admin_api.post(URL, json={"config": docker_doc()})

    assert response.status_code == 202
    data = response.json["data"]
    assert data["status"] in ("pending", "running") and data["checks"] == []
    job = {}
    for _ in range(100):
        job = admin_api.get(f"/api/v1/jobs/{data['job_id']}").json["data"]
        if job["status"] == "succeeded":
            break
        time.sleep(0.2)
    assert job["status"] == "succeeded"
    assert [row["name"] for row in job["result"]["checks"]] == SHALLOW


def test_a_slow_check_never_holds_the_request_past_a_few_seconds(admin_api, monkeypatch):
    """Decisions 12: the request waited up to 95 s for the check's job; now 5 s, then 202."""
    from app.services.sandboxes.check import job as sandbox_check
    from tests.jobs.helpers import wait_for_terminal

    real = sandbox_check.check

    def slow(*args, **kwargs):
        time.sleep(8)  # a provider that takes its time (in the job, not the request)
        return real(*args, **kwargs)

    monkeypatch.setattr(sandbox_check, "check", slow)
    started = time.monotonic()
    response = admin_api.post(URL, json={"config": docker_doc()})
    waited = time.monotonic() - started
    assert response.status_code == 202 and waited < 7, (response.status_code, waited)
    assert wait_for_terminal(response.json["data"]["job_id"], 30).status.value == "succeeded"
