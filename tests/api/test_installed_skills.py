"""The per-config skill API (reference 3.2) on its accept side: a recording dispatcher
stands in for the worker so each test sees exactly which runs were asked for (the runs
themselves are tests/installs/). Attacks across workspaces and configs come first."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import AuditEvent, InstalledSkill, InstallStatus, Job
from tests.fakes import skill_registry
from tests.fakes.skill_archives import make_zip, skill_files
from tests.sweeps.routes import make_installed_skill, make_sandbox_config

bundle_dir = skill_registry.bundle_dir  # fixture
sites = skill_registry.sites  # fixture
CANARY = "admin-env-canary-9931"


class RecordingDispatcher:
    def __init__(self):
        self.submitted: list[str] = []

    def submit(self, job_id: str, timeout: int, tenant_id: int | None = None) -> None:
        self.submitted.append(job_id)


@pytest.fixture
def world(two_tenants, bearer, bundle_dir, app, monkeypatch):
    recorder = RecordingDispatcher()
    monkeypatch.setitem(app.extensions, "sandlot_dispatcher", recorder)
    a, b = two_tenants
    config = make_sandbox_config(a.tenant)
    skill = make_installed_skill(a.tenant, config, secret=CANARY)
    return {"a": a, "b": b, "admin": bearer(a.admin, a.tenant), "jobs": recorder,
            "b_admin": bearer(b.admin, b.tenant), "config": config, "skill": skill,
            "base": f"/api/v1/sandbox-configs/{config}/skills"}


def test_another_workspace_or_config_cannot_reach_a_skill(world):
    other_config = make_sandbox_config(world["a"].tenant)
    skill = world["skill"]
    for path in (f"{world['base']}/{skill}",
                 f"/api/v1/sandbox-configs/{other_config}/skills/{skill}"):
        assert world["b_admin"].get(path).status_code == 404
    wrong = world["admin"].get(f"/api/v1/sandbox-configs/{other_config}/skills/{skill}")
    assert wrong.status_code == 404 and wrong.json["error"]["message"] == \
        "No such skill is installed on this sandbox config."
    patched = world["b_admin"].patch(f"{world['base']}/{skill}", json={"enabled": False})
    assert patched.status_code == 404
    assert db.session.get(InstalledSkill, skill).enabled is True


def test_admin_values_are_write_only(world):
    base = f"{world['base']}/{world['skill']}"
    listed = world["admin"].get(world["base"])
    for response in (listed, world["admin"].get(base)):
        assert CANARY not in response.get_data(as_text=True)
    assert listed.json["data"][0]["envs"] == [
        {"name": "SWEEP_ENV", "description": "", "required": False, "is_set": True,
         "needs_reentry": False}]
    # *** keeps, "" clears, a new value is stored encrypted and never echoed.
    kept = world["admin"].patch(base, json={"envs": {"SWEEP_ENV": "***"}})
    assert kept.json["data"]["envs"][0]["is_set"] is True
    assert db.session.get(InstalledSkill, world["skill"]).env_values == {"SWEEP_ENV": CANARY}
    cleared = world["admin"].patch(base, json={"envs": {"SWEEP_ENV": ""}})
    assert cleared.json["data"]["envs"][0]["is_set"] is False
    audit = " ".join(str(e.data) for e in db.session.scalars(select(AuditEvent)))
    assert CANARY not in audit


def test_patch_is_all_or_nothing_and_only_for_declared_names(world):
    base = f"{world['base']}/{world['skill']}"
    response = world["admin"].patch(base, json={"enabled": False, "envs": {
        "SWEEP_ENV": "fine", "NOT_DECLARED": "x"}})
    assert response.status_code == 400
    (error,) = response.json["error"]["data"]["errors"]
    assert error["field"] == "envs.NOT_DECLARED"
    assert error["message"].endswith("does not declare this variable")
    row = db.session.get(InstalledSkill, world["skill"])
    db.session.refresh(row)
    assert row.enabled is True and row.env_values == {"SWEEP_ENV": CANARY}
    too_long = world["admin"].patch(base, json={"envs": {"SWEEP_ENV": "x" * 8193}})
    assert too_long.status_code == 400
    assert too_long.json["error"]["data"]["errors"][0]["message"] == "at most 8 KiB"
    empty = world["admin"].patch(base, json={})
    assert empty.status_code == 400 and empty.json["error"]["message"] == \
        "Nothing to change: turn the skill on or off, or set its variables."
    assert empty.json["error"]["data"] == {"fields": ["enabled", "envs"]}  # the machine words


def test_upload_registers_the_definition_and_installs_it_as_a_job(world):
    data = make_zip(skill_files("uploaded-skill"))
    response = world["admin"].post(world["base"], data={"file": (io.BytesIO(data), "s.zip")},
                                   content_type="multipart/form-data")
    assert response.status_code == 202, response.json
    skill_id = response.json["data"]["skill_id"]
    row = db.session.get(InstalledSkill, skill_id)
    assert (row.status, row.name, row.description) == ("installing", "uploaded-skill",
                                                       "A demo skill")
    assert world["jobs"].submitted == [row.job_id]
    assert db.session.get(Job, row.job_id).kind == "install_skill"
    catalog = world["admin"].get("/api/v1/skills/catalog").json["data"]
    assert "uploaded-skill" in [entry["name"] for entry in catalog]
    missing = world["admin"].post(world["base"], data={}, content_type="multipart/form-data")
    assert missing.status_code == 400


def test_files_come_from_the_stored_bundle(world):
    base = f"{world['base']}/{world['skill']}"
    files = world["admin"].get(f"{base}/files").json["data"]
    assert {f["path"] for f in files} == {"SKILL.md", "scripts/run.py", "assets/logo.png"}
    content = world["admin"].get(f"{base}/files/content?path=scripts/run.py").json["data"]
    assert content["content"] == "print('hello from the skill')\n"
    bad = world["admin"].get(f"{base}/files/content?path=../../etc/passwd")
    assert bad.status_code == 400


def test_reinstall_stop_and_uninstall_accept_rules(world):
    base = f"{world['base']}/{world['skill']}"
    assert world["admin"].post(f"{base}/stop").status_code == 400  # ready: not installing
    again = world["admin"].post(f"{base}/reinstall")
    assert again.status_code == 202 and again.json["data"] == {"skill_id": world["skill"]}
    row = db.session.get(InstalledSkill, world["skill"])
    assert row.status == InstallStatus.installing and len(world["jobs"].submitted) == 1
    busy = world["admin"].post(f"{base}/reinstall", json={"instructions": "use the mirror"})
    assert busy.status_code == 409
    stopped = world["admin"].post(f"{base}/stop")
    assert stopped.json["data"]["status"] == "failed"
    assert stopped.json["data"]["error"] == "install stopped"
    assert world["admin"].post(f"{base}/stop").json["data"]["status"] == "failed"
    removed = world["admin"].delete(base)
    assert removed.status_code == 202
    db.session.refresh(row)
    assert row.status == InstallStatus.removing
    assert db.session.get(Job, row.job_id).kind == "uninstall_skill"


def test_reinstall_tells_a_gone_archive_from_an_unreachable_store(world, app, monkeypatch):
    """Issue 28 item 5: "register the skill again" only when the archive is gone; a store
    that does not answer is a 503 to retry, and nothing is started or changed."""
    import socket

    base = f"{world['base']}/{world['skill']}"
    row = db.session.get(InstalledSkill, world["skill"])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setitem(app.config, "SKILL_BUNDLE_STORE",
                        f"s3://bundles?endpoint=http://127.0.0.1:{closed}")
    down = world["admin"].post(f"{base}/reinstall")
    assert down.status_code == 503, down.json
    assert "register" not in down.json["error"]["message"]
    assert str(closed) not in down.json["error"]["message"]
    monkeypatch.setitem(app.config, "SKILL_BUNDLE_STORE", "")
    db.session.refresh(row)
    assert row.status == InstallStatus.ready and world["jobs"].submitted == []

    from app.services.skills import store
    store.blobs().delete(row.bundle_ref)
    gone = world["admin"].post(f"{base}/reinstall")
    assert gone.status_code == 400
    assert "gone; register the skill again" in gone.json["error"]["message"]


def test_guidance_is_refused_by_the_deterministic_installer(world):
    base = f"{world['base']}/{world['skill']}"
    assert world["admin"].get(f"{base}/guidance").json["data"] == {"accepting": False,
                                                                  "messages": []}
    sent = world["admin"].post(f"{base}/guidance", json={
        "expected_message_id": "m", "steer_id": "s", "content": "try harder"})
    assert sent.status_code == 409 and sent.json["error"]["code"] == "conflict"


def test_install_by_source_upserts_the_catalog_and_accepts_a_run(world, sites):
    repo = {f"skills/src-skill/{k}": v for k, v in skill_files("src-skill", "3.0.0").items()}
    sites.codeload.add("/acme/skills/zip/main", make_zip(repo, prefix="skills-main/"))
    source = f"{sites.github.url}/acme/skills/tree/main/skills/src-skill"
    response = world["admin"].post(world["base"], json={"source": source})
    assert response.status_code == 202, response.json
    row = db.session.get(InstalledSkill, response.json["data"]["skill_id"])
    assert (row.name, row.version, row.status) == ("src-skill", "3.0.0", "installing")
    assert world["jobs"].submitted == [row.job_id]
    names = [e["name"] for e in world["admin"].get("/api/v1/skills/catalog").json["data"]]
    assert "src-skill" in names
    refused = world["admin"].post(world["base"], json={"source": "http://127.0.0.1:1/x.zip"})
    assert refused.status_code == 400


@pytest.mark.parametrize("method, path", [("post", ""), ("patch", "/{skill}"),
                                          ("post", "/{skill}/reinstall")])
def test_a_body_over_64_kib_is_413_before_any_field_is_judged(world, method, path):
    """Decisions 13: an oversize body is refused as such, even when it also carries
    unknown fields (those would be 400 in a small body); nothing is written."""
    url = world["base"] + path.format(skill=world["skill"])
    body = {"source": "@owner/x", "unknown": "y" * (64 * 1024)}
    response = getattr(world["admin"], method)(url, json=body)
    assert response.status_code == 413, response.json
    assert response.json["error"]["code"] == "payload_too_large"
    assert world["jobs"].submitted == []
