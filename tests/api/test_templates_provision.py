"""Template provisioning on E2B and Cube (reference 3.1.7, 5.4), for real over HTTP: the
real `e2b` SDK's template-build calls against the local fake E2B/Cube servers, the job
on the in-process worker, the API polled as a client would.

The fakes build templates with a delay (`build_seconds`) and fail builds of the images in
`failing_images`; `untag` leaves a template without its `default` tag.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, require_docker
from tests.factories import config_doc

pytestmark = pytest.mark.usefixtures("private_endpoints")

BASE = "/api/v1/sandbox-configs"
QUERY = f"{BASE}/templates/query"
FIELDS = {"id", "name", "status", "version", "image", "created_at", "updated_at", "standard",
          "desktop", "error", "instance_type", "network_type", "allow_internet_access"}


def _server(flavor: str, suffix: str, **kwargs) -> Iterator[object]:
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer(flavor, image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}{suffix}", **kwargs).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def e2b() -> Iterator[object]:
    yield from _server("e2b", "tpl")


@pytest.fixture(scope="module")
def cube() -> Iterator[object]:
    yield from _server("cube", "tplc")


@pytest.fixture(scope="module")
def attacker() -> Iterator[object]:
    yield from _server("e2b", "tpla", api_key="attacker-key-000000")


@pytest.fixture(autouse=True)
def _reset(request, app, monkeypatch):
    # Templates are built from the sandbox image the fakes' sandboxes run.
    monkeypatch.setitem(app.config, "SANDBOX_TEMPLATE_STANDARD_IMAGE", BASE_IMAGE)
    monkeypatch.setitem(app.config, "SANDBOX_TEMPLATE_DESKTOP_IMAGE", BASE_IMAGE)
    for name in ("e2b", "cube"):
        if name in request.fixturenames:
            fake = request.getfixturevalue(name)
            fake.build_seconds, fake.failing_images = 0.0, set()
            fake.clear_failures()
            for template_id in (fake.template_named("sandlot-standard-")  # other tests' builds
                                + fake.template_named("sandlot-desktop-")):
                del fake.templates[template_id]
    yield


@pytest.fixture
def admin_api(two_tenants, bearer):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


def doc(fake, **block) -> dict:
    settings = {k: v for k, v in fake.settings().items() if k != "allow_private_endpoints"}
    desktop = block.pop("desktop_enabled", False)
    return config_doc(fake.flavor, {**settings, **block}, desktop_enabled=desktop)


def create(api, fake, **block) -> str:
    response = api.post(BASE, json={"name": f"tpl-{uuid.uuid4().hex[:8]}",
                                    "config": doc(fake, **block)})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


def template_of(config_id: str) -> str:
    db.session.rollback()
    row = db.session.get(SandboxConfig, config_id, populate_existing=True)
    return row.config[row.sandbox_type]["template_id"]


def finish(api, job: dict, timeout: float = 60) -> dict:
    """Poll GET /jobs/:id as a client does, until the job ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = api.get(f"/api/v1/jobs/{job['id']}").json["data"]
        if body["status"] not in ("pending", "running"):
            return body
        time.sleep(0.1)
    raise AssertionError(f"job {job['id']} did not end in {timeout} s")


def check_rows(api, response) -> dict[str, dict]:
    assert response.status_code in (200, 202), response.json
    body = response.json["data"]
    if response.status_code == 202:
        body = finish(api, {"id": body["job_id"]}, timeout=120)["result"]
    return {row["name"]: row for row in body["checks"]}


def test_catalog_rows_carry_every_field_of_3_1_7(admin_api, e2b, cube):
    for fake in (e2b, cube):
        config_id = create(admin_api, fake)
        response = admin_api.post(QUERY, json={"config_id": config_id})
        assert response.status_code == 200, response.json
        data = response.json["data"]
        assert data["standard_template_id"] == fake.template_id
        assert data["provisioned"] is False and data["job"] is None
        row = next(t for t in data["templates"] if t["id"] == fake.template_id)
        assert set(row) == FIELDS and row["standard"] and row["status"] == "ready"
        assert row["created_at"] and row["version"]
    cube_row = next(t for t in admin_api.post(QUERY, json={"config": doc(cube)})
                    .json["data"]["templates"] if t["id"] == cube.template_id)
    assert cube_row["instance_type"] == "cube.small" and cube_row["network_type"] == "tap"
    assert cube_row["allow_internet_access"] is True and cube_row["image"] == BASE_IMAGE


def test_ensure_builds_a_missing_template_in_a_job_and_is_single_flighted(admin_api, e2b):
    e2b.build_seconds = 2.0
    config_id = create(admin_api, e2b, template_id="gone-template")
    builds_before = len(e2b.api_calls("POST", "/v3/templates"))
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: admin_api.post(QUERY, json={
            "config_id": config_id, "ensure_standard": True}), range(2)))
    assert time.monotonic() - started < 2.0  # no request waits on the build
    assert [a.status_code for a in answers] == [202, 202], [a.json for a in answers]
    jobs = {a.json["data"]["job"]["id"] for a in answers}
    assert len(jobs) == 1  # the second call joined the first build
    again = admin_api.post(QUERY, json={"config_id": config_id, "ensure_standard": True})
    assert again.status_code == 202 and again.json["data"]["job"]["id"] in jobs

    job = finish(admin_api, answers[0].json["data"]["job"])
    assert job["status"] == "succeeded", job
    result = job["result"]
    built = result["built"]["standard"]
    assert result["provisioned"] is True and result["standard_template_id"] == built
    assert e2b.templates[built]["names"][0].startswith("sandlot-standard-")
    assert "ready" in job["log"] and job["percent"] == 100
    requested = e2b.api_calls("POST", "/v3/templates")
    assert len(requested) == builds_before + 1
    # The SDK's build wire: name and the `default` tag, then the base image, with the key.
    assert requested[-1].body["tags"] == ["default"]
    assert requested[-1].headers.get("X-API-Key") == e2b.api_key
    started_build = e2b.api_calls("POST", f"/v2/templates/{built}/builds/")[-1]
    assert started_build.body["fromImage"] == BASE_IMAGE
    # Ensure never rewrites configs; the build is now present, so no second build.
    assert template_of(config_id) == "gone-template"
    present = admin_api.post(QUERY, json={"config_id": config_id, "ensure_standard": True})
    assert present.status_code == 200 and present.json["data"]["job"] is None
    assert present.json["data"]["standard_template_id"] == built


def test_a_failed_build_fails_the_job_with_the_providers_reason(admin_api, cube, app):
    cube.failing_images = {BASE_IMAGE}
    config_id = create(admin_api, cube)
    response = admin_api.post(QUERY, json={"config_id": config_id, "ensure_desktop": True})
    assert response.status_code == 202, response.json
    job = finish(admin_api, response.json["data"]["job"])
    assert job["status"] == "failed"
    assert "desktop template build failed" in job["error"] and "pulling" in job["error"]
    assert cube.api_key not in job["error"] + job["log"]
    # The failed build counts as absent: the next ensure builds again.
    cube.failing_images.clear()
    retry = admin_api.post(QUERY, json={"config_id": config_id, "ensure_desktop": True})
    assert retry.status_code == 202
    done = finish(admin_api, retry.json["data"]["job"])
    assert done["status"] == "succeeded", done
    assert done["result"]["desktop_template_id"] == done["result"]["built"]["desktop"]


def test_replace_switches_every_same_identity_config_then_deletes_the_old(admin_api, e2b):
    first = create(admin_api, e2b)
    second = create(admin_api, e2b)
    desktop = create(admin_api, e2b, desktop_enabled=True)
    job = finish(admin_api, admin_api.post(QUERY, json={
        "config_id": first, "replace_standard": True}).json["data"]["job"])
    assert job["status"] == "succeeded", job
    new = job["result"]["built"]["standard"]
    assert template_of(first) == template_of(second) == new
    assert template_of(desktop) == e2b.template_id  # another role: untouched
    assert e2b.template_id in e2b.templates  # the account's own template is never deleted

    again = admin_api.post(QUERY, json={"config_id": second, "replace_standard": True})
    newer = finish(admin_api, again.json["data"]["job"])["result"]["built"]["standard"]
    assert template_of(first) == template_of(second) == newer != new
    assert new not in e2b.templates  # superseded, deleted
    assert e2b.api_calls("DELETE", f"/templates/{new}")
    # A sandbox boots from the new template through the provider API.
    check = admin_api.post("/api/v1/system/sandbox-check",
                           json={"config_id": first, "deep": True})
    checks = check_rows(admin_api, check)
    assert checks["template_exists"]["ok"] is True
    assert checks["sandbox_exec"]["ok"] is True, checks["sandbox_exec"]


def test_replace_is_refused_while_a_skill_snapshot_or_install_exists(admin_api, e2b,
                                                                    two_tenants):
    a, _ = two_tenants
    first = create(admin_api, e2b)
    second = create(admin_api, e2b)
    builds_before = len(e2b.api_calls("POST", "/v3/templates"))
    row = db.session.get(SandboxConfig, second)
    row.config = {**row.config, "skill_image": {"snapshot_id": "snap-1", "generation": 1}}
    db.session.commit()
    refused = admin_api.post(QUERY, json={"config_id": first, "replace_standard": True})
    assert refused.status_code == 409, refused.json
    assert refused.json["error"]["code"] == "skill_snapshot_blocks_template"

    row.config = {k: v for k, v in row.config.items() if k != "skill_image"}
    db.session.add(InstalledSkill(id=str(uuid.uuid4()), tenant_id=a.tenant.id,
                                  sandbox_config_id=second, name="busy",
                                  status=InstallStatus.installing))
    db.session.commit()
    busy = admin_api.post(QUERY, json={"config_id": first, "replace_desktop": True})
    assert busy.status_code == 409 and busy.json["error"]["code"] == (
        "skill_snapshot_blocks_template")
    assert len(e2b.api_calls("POST", "/v3/templates")) == builds_before
    # Ensure is not a replace: it is not blocked.
    ensure = admin_api.post(QUERY, json={"config_id": first, "ensure_standard": True})
    assert ensure.status_code == 200


def test_untagged_builds_are_reported_and_explained(admin_api, e2b):
    config_id = create(admin_api, e2b)
    job = finish(admin_api, admin_api.post(QUERY, json={
        "config_id": config_id, "ensure_desktop": True}).json["data"]["job"])
    built = job["result"]["built"]["desktop"]
    e2b.untag(built)
    data = admin_api.post(QUERY, json={"config_id": config_id}).json["data"]
    row = next(t for t in data["templates"] if t["id"] == built)
    assert row["status"] == "untagged" and "never become ready" in row["error"]
    # The sandbox check explains it too (reference 5.4).
    other = create(admin_api, e2b, template_id=built)
    check = admin_api.post("/api/v1/system/sandbox-check", json={"config_id": other})
    template_row = check_rows(admin_api, check)["template_exists"]
    assert template_row["ok"] is False and "default" in template_row["message"]
    # An untagged template counts as absent: ensure builds a fresh one.
    rebuilt = admin_api.post(QUERY, json={"config_id": config_id, "ensure_desktop": True})
    assert rebuilt.status_code == 202
    finish(admin_api, rebuilt.json["data"]["job"])


def test_a_stored_key_is_never_sent_to_a_swapped_endpoint(admin_api, e2b, attacker):
    """Attack: reuse the stored key (`***`) with the API URL pointed at another server."""
    config_id = create(admin_api, e2b)
    swapped = doc(e2b, api_key="***", api_url=attacker.api_url)
    for options in ({"ensure_standard": True}, {"replace_standard": True}, {}):
        response = admin_api.post(QUERY, json={"config_id": config_id, "config": swapped,
                                               **options})
        assert response.status_code == 400, response.json
        fields = [e["field"] for e in response.json["error"]["data"]["errors"]]
        assert "e2b.api_key" in fields
    sent = [c for c in attacker.calls if e2b.api_key in str(c.headers) + str(c.body)]
    assert sent == [] and not attacker.api_calls("POST", "/v3/templates")


def test_replace_needs_a_stored_config_and_docker_has_no_catalog_to_build(admin_api, e2b):
    response = admin_api.post(QUERY, json={"config": doc(e2b), "replace_standard": True})
    assert response.status_code == 400
    assert response.json["error"]["data"]["errors"][0]["field"] == "config_id"


def test_an_install_started_during_a_replace_keeps_the_old_template(admin_api, e2b,
                                                                   two_tenants):
    """The block is checked again before the switch: a skill install that began while the
    template was building wins, and the fresh template goes instead of the old one."""
    a, _ = two_tenants
    e2b.build_seconds = 2.0
    config_id = create(admin_api, e2b)
    response = admin_api.post(QUERY, json={"config_id": config_id, "replace_standard": True})
    assert response.status_code == 202, response.json
    assert wait_until(lambda: e2b.template_named("sandlot-standard-"))
    db.session.add(InstalledSkill(id=str(uuid.uuid4()), tenant_id=a.tenant.id,
                                  sandbox_config_id=config_id, name="late",
                                  status=InstallStatus.installing))
    db.session.commit()
    job = finish(admin_api, response.json["data"]["job"])
    assert job["status"] == "failed" and "uninstall them" in job["error"]
    assert template_of(config_id) == e2b.template_id
    assert e2b.template_named("sandlot-standard-") == []  # the fresh build was deleted


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
