"""Issue 22 item 3: quotas on what holds the host's capacity, counted in the database so
every process sees the same use. Attack (worked before): a viewer opened 20 sessions in
22 s, each a live sandbox; nothing stopped the 120th from committing the host's memory.

Past a quota the answer is 429 `quota_exceeded` with the quota, its limit and the use;
deployment defaults come from settings, the operator overrides them per workspace
(`flask quotas set`). A session's sandbox counts while the session holds it, paused or
not, until the session ends."""

from __future__ import annotations

import pytest

from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig
from app.services import audit
from app.services.sandboxes import configs as service
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.sweeps.routes import make_catalog_skill, make_installed_skill

CONFIGS = "/api/v1/sandbox-configs"


class RecordingDispatcher:
    def submit(self, job_id: str, timeout: int, tenant_id: int | None = None) -> None:
        pass  # the install stays `installing`: nothing runs it


@pytest.fixture
def docker_world(app, two_tenants, bearer):
    require_docker()
    a, b = two_tenants
    made = {}
    for group in (a, b):
        made[group.tenant.id] = service.create_config(
            group.tenant, audit.SystemActor("tests"), "Local", "",
            {"sandbox_type": "docker", "docker": {"image": BASE_IMAGE, "network_mode": "none"}})
    return {"a": a, "b": b, "configs": made, "bearer": bearer}


def _session(api, config: SandboxConfig) -> str:
    opened = api.post("/api/v1/sessions", json={"sandbox_config_id": config.id})
    assert opened.status_code == 201, opened.json
    return opened.json["data"]["id"]


def _exec(api, session_id: str):
    return api.post(f"/api/v1/sessions/{session_id}/exec", json={"command": "true"})


def _refused(response, quota: str, limit: int, used: int) -> None:
    assert response.status_code == 429, response.json
    error = response.json["error"]
    assert error["code"] == "quota_exceeded"
    assert error["data"] == {"quota": quota, "limit": limit, "used": used}
    assert str(limit) in error["message"]


def test_a_member_past_their_live_sandboxes_is_refused_until_one_ends(app, docker_world,
                                                                      monkeypatch):
    monkeypatch.setitem(app.config, "QUOTA_LIVE_SANDBOXES_PER_MEMBER", 2)
    a, config = docker_world["a"], docker_world["configs"][docker_world["a"].tenant.id]
    viewer = docker_world["bearer"](a.viewer, a.tenant)
    first, second, third = (_session(viewer, config) for _ in range(3))
    assert _exec(viewer, first).status_code == 200
    assert _exec(viewer, second).status_code == 200
    _refused(_exec(viewer, third), "live_sandboxes_per_member", 2, 2)
    assert _exec(viewer, first).status_code == 200  # a sandbox already held still runs
    # Another member of the workspace has their own allowance.
    other = docker_world["bearer"](a.contributor, a.tenant)
    assert _exec(other, _session(other, config)).status_code == 200
    assert viewer.delete(f"/api/v1/sessions/{first}").status_code == 200
    assert _exec(viewer, third).status_code == 200


def test_a_workspace_past_its_live_sandboxes_is_refused_and_the_operator_raises_it(
        app, docker_world, monkeypatch):
    monkeypatch.setitem(app.config, "QUOTA_LIVE_SANDBOXES_PER_WORKSPACE", 1)
    a, b = docker_world["a"], docker_world["b"]
    config = docker_world["configs"][a.tenant.id]
    viewer = docker_world["bearer"](a.viewer, a.tenant)
    contributor = docker_world["bearer"](a.contributor, a.tenant)
    assert _exec(viewer, _session(viewer, config)).status_code == 200
    waiting = _session(contributor, config)
    _refused(_exec(contributor, waiting), "live_sandboxes_per_workspace", 1, 1)
    # Another workspace is not held back by this one's use.
    other = docker_world["bearer"](b.viewer, b.tenant)
    assert _exec(other, _session(other, docker_world["configs"][b.tenant.id])).status_code \
        == 200
    result = app.test_cli_runner().invoke(args=[
        "quotas", "set", a.tenant.name, "live_sandboxes_per_workspace", "2"])
    assert result.exit_code == 0, result.output
    assert _exec(contributor, waiting).status_code == 200
    shown = app.test_cli_runner().invoke(args=["quotas", "show", a.tenant.name])
    assert "live_sandboxes_per_workspace" in shown.output and "2 (set for" in shown.output


def test_the_deployments_memory_budget_admits_no_sandbox_past_it(app, docker_world,
                                                                 monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_MEMORY_BUDGET_MB", 1500)  # one 1 GiB sandbox
    a, b = docker_world["a"], docker_world["b"]
    viewer = docker_world["bearer"](a.viewer, a.tenant)
    assert _exec(viewer, _session(viewer, docker_world["configs"][a.tenant.id])) \
        .status_code == 200
    other = docker_world["bearer"](b.viewer, b.tenant)
    refused = _exec(other, _session(other, docker_world["configs"][b.tenant.id]))
    _refused(refused, "memory_budget_mb", 1500, 1024)
    assert a.tenant.name not in refused.json["error"]["message"]  # nothing of workspace A


def test_sandbox_configs_per_workspace(app, two_tenants, bearer, monkeypatch):
    monkeypatch.setitem(app.config, "QUOTA_SANDBOX_CONFIGS_PER_WORKSPACE", 1)
    a, b = two_tenants
    body = {"config": {"sandbox_type": "docker", "docker": {"image": BASE_IMAGE}}}
    admin = bearer(a.admin, a.tenant)
    assert admin.post(CONFIGS, json={"name": "one", **body}).status_code == 201
    _refused(admin.post(CONFIGS, json={"name": "two", **body}),
             "sandbox_configs_per_workspace", 1, 1)
    assert db.session.query(SandboxConfig).filter_by(tenant_id=a.tenant.id).count() == 1
    assert bearer(b.admin, b.tenant).post(CONFIGS, json={"name": "one", **body}) \
        .status_code == 201


def test_concurrent_installs_per_workspace(app, two_tenants, bearer, monkeypatch):
    monkeypatch.setitem(app.extensions, "sandlot_dispatcher", RecordingDispatcher())
    monkeypatch.setitem(app.config, "QUOTA_CONCURRENT_INSTALLS_PER_WORKSPACE", 1)
    a, _ = two_tenants
    config = service.create_config(a.tenant, audit.SystemActor("tests"), "Local", "", {
        "sandbox_type": "docker", "docker": {"image": BASE_IMAGE}})
    busy = db.session.get(InstalledSkill, make_installed_skill(a.tenant, config.id))
    busy.status = InstallStatus.installing
    db.session.commit()
    admin = bearer(a.admin, a.tenant)
    entry = make_catalog_skill(a.tenant, name="second-skill")
    refused = admin.post(f"/api/v1/skills/catalog/{entry}/install",
                         json={"sandbox_config_ids": [config.id]})
    _refused(refused, "concurrent_installs_per_workspace", 1, 1)
