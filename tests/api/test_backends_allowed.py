"""The operator's list of backends (`SANDBOX_BACKENDS`; reference 1.1: Docker can be
turned off deployment-wide because its engine socket is root on the host). A backend left
out cannot be chosen, and its configs' sandboxes cannot be created or run; what exists
still lists, and the editor offers only what is allowed."""

from __future__ import annotations

import io

import pytest

from app import create_app
from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig, SandboxSession
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.skills.installs import pipeline
from tests.factories import config_doc
from tests.fakes.skill_archives import make_zip, skill_files
from tests.sweeps.routes import make_installed_skill
from tests.web._support import text

OFF = "Docker sandboxes are turned off on this deployment"


@pytest.fixture
def docker_off(app, two_tenants, bearer, monkeypatch):
    """A Docker config saved while Docker was allowed, then the operator turned it off."""
    a, _ = two_tenants
    config = service.create_config(a.tenant, audit.SystemActor("tests"), "Local", "",
                                   config_doc("docker"))
    monkeypatch.setitem(app.config, "SANDBOX_BACKENDS", ["e2b", "cube"])
    return {"a": a, "config": config, "admin": bearer(a.admin, a.tenant),
            "member": bearer(a.viewer, a.tenant)}


def test_a_turned_off_backend_cannot_be_chosen(docker_off):
    admin = docker_off["admin"]
    before = db.session.query(SandboxConfig).count()
    created = admin.post("/api/v1/sandbox-configs", json={
        "name": "Another", "config": {"sandbox_type": "docker",
                                      "docker": {"image": "sandlot/sandbox:base"}}})
    assert created.status_code == 400, created.json
    assert created.json["error"]["data"]["errors"][0]["field"] == "sandbox_type"
    assert created.json["error"]["message"] == (
        "Backend is Docker, which is turned off on this deployment (the operator's choice); "
        "choose another backend.")
    assert db.session.query(SandboxConfig).count() == before
    config = docker_off["config"]
    updated = admin.put(f"/api/v1/sandbox-configs/{config.id}", json={
        "name": "Renamed", "config": {"sandbox_type": "docker",
                                      "docker": {"image": "sandlot/sandbox:base"}}})
    assert updated.status_code == 400, updated.json
    assert "Docker, which is turned off" in updated.json["error"]["message"]
    assert db.session.get(SandboxConfig, config.id).name == "Local"
    # What exists still lists: the admin can see it and end or delete what it runs.
    listed = admin.get("/api/v1/sandbox-configs").json["data"]
    assert [c["name"] for c in listed] == ["Local"]


def test_a_turned_off_backend_cannot_run(docker_off):
    member, config = docker_off["member"], docker_off["config"]
    opened = member.post("/api/v1/sessions", json={"sandbox_config_id": config.id})
    assert opened.status_code == 400, opened.json
    assert opened.json["error"]["code"] == "sandbox_backend_disabled"
    assert OFF in opened.json["error"]["message"]
    assert db.session.query(SandboxSession).count() == 0
    # A session opened while Docker was allowed cannot run a command now.
    session = SandboxSession(id="0b7c2f0e-5a0e-4d7e-9a59-3f4a1c1e0d11",
                             tenant_id=config.tenant_id, user_id=docker_off["a"].viewer.id,
                             sandbox_config_id=config.id)
    db.session.add(session)
    db.session.commit()
    ran = member.post(f"/api/v1/sessions/{session.id}/exec", json={"command": "echo hi"})
    assert ran.status_code == 400 and ran.json["error"]["code"] == "sandbox_backend_disabled"


def test_a_turned_off_backend_takes_no_install_or_reinstall(docker_off):
    admin, config = docker_off["admin"], docker_off["config"]
    data = make_zip(skill_files("offline-skill"))
    installed = admin.post(f"/api/v1/sandbox-configs/{config.id}/skills",
                           data={"file": (io.BytesIO(data), "s.zip")},
                           content_type="multipart/form-data")
    assert installed.status_code == 400, installed.json
    assert installed.json["error"]["code"] == "sandbox_backend_disabled"
    skill = make_installed_skill(docker_off["a"].tenant, config.id)
    again = admin.post(f"/api/v1/sandbox-configs/{config.id}/skills/{skill}/reinstall")
    assert again.status_code == 400 and again.json["error"]["code"] == "sandbox_backend_disabled"
    assert db.session.get(InstalledSkill, skill).status == "ready"


def test_the_editor_offers_only_allowed_backends(docker_off, login_as):
    a = docker_off["a"]
    admin = login_as(a.admin, a.tenant)
    page = text(admin.get("/sandboxes/new"))
    assert '<option value="e2b" selected>E2B</option>' in page
    assert '<option value="docker"' not in page
    # Editing a config of a turned-off backend says so rather than pretending otherwise.
    edit = text(admin.get(f"/sandboxes/{docker_off['config'].id}/edit"))
    assert '<option value="docker" selected>Docker (turned off)</option>' in edit


def test_docker_is_opt_in_in_production_and_on_for_make_run(monkeypatch):
    monkeypatch.delenv("SANDBOX_BACKENDS", raising=False)
    from app.config import DevelopmentConfig, ProductionConfig
    assert DevelopmentConfig.SANDBOX_BACKENDS == ["docker", "e2b", "cube"]
    assert ProductionConfig.SANDBOX_BACKENDS == ["e2b", "cube"]
    with pytest.raises(RuntimeError, match="unknown backends local"):
        create_app({"ENV": "testing", "SANDBOX_BACKENDS": ["docker", "local"]})


def test_a_run_accepted_before_the_backend_was_turned_off_fails_saying_why(docker_off):
    skill_id = make_installed_skill(docker_off["a"].tenant, docker_off["config"].id)
    row = db.session.get(InstalledSkill, skill_id)
    row.status, row.job_id = InstallStatus.installing, "job-before-the-change"
    db.session.commit()
    result = pipeline.install("job-before-the-change", skill_id)
    assert result["status"] == "failed" and OFF in result["error"], result
    row = db.session.get(InstalledSkill, skill_id, populate_existing=True)
    assert row.status == InstallStatus.failed and OFF in row.error
