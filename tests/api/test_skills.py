"""Skill catalog API (reference 3.3, 6.5, 6.6, 7.1 accept): register, browse, categories,
delete and the install fan-out; every rejection stores nothing."""

from __future__ import annotations

import base64
import io

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.jobs.runner import run_job
from app.models import (
    InstalledSkill,
    InstallStatus,
    Job,
    JobStatus,
    SandboxConfig,
    SkillCatalogEntry,
)
from app.models.types import utcnow
from tests.fakes import skill_registry
from tests.fakes.skill_archives import PNG, make_zip, skill_files, skill_md, zip_with_symlink
from tests.fakes.skill_registry import Sites, stored_blobs
from tests.sweeps.routes import make_sandbox_config

BASE = "/api/v1/skills/catalog"
sites = skill_registry.sites  # fixtures
bundle_dir = skill_registry.bundle_dir


class RecordingDispatcher:
    """Takes the place of the job dispatcher: records what was handed over, runs nothing."""

    def __init__(self):
        self.submitted: list[tuple[str, int]] = []

    def submit(self, job_id: str, timeout: int, tenant_id: int | None = None) -> None:
        self.submitted.append((job_id, timeout))


@pytest.fixture
def dispatcher(app, monkeypatch):
    recorder = RecordingDispatcher()
    monkeypatch.setitem(app.extensions, "sandlot_dispatcher", recorder)
    return recorder


@pytest.fixture
def world(two_tenants, bearer, bundle_dir, dispatcher):
    a, b = two_tenants
    return {"a": a, "b": b, "admin": bearer(a.admin, a.tenant),
            "viewer": bearer(a.viewer, a.tenant), "dir": bundle_dir, "jobs": dispatcher}


def upload(api, data: bytes, filename: str = "skill.zip"):
    return api.post(BASE, data={"file": (io.BytesIO(data), filename)},
                    content_type="multipart/form-data")


def register_zip(api, name: str = "demo-skill", version: str = "1.0.0") -> dict:
    response = upload(api, make_zip(skill_files(name, version)))
    assert response.status_code == 201, response.json
    return response.json["data"]


def count(model) -> int:
    return db.session.scalar(select(func.count()).select_from(model))


def test_done_when_zip_and_github_skills_are_browsed_and_installed_onto_two_configs(
        world, sites: Sites):
    api = world["admin"]
    zipped = register_zip(api, "zip-skill")
    assert zipped["name"] == "zip-skill" and zipped["version"] == "1.0.0"

    repo = {f"skills/gh-skill/{k}": v for k, v in skill_files("gh-skill", "2.1.0").items()}
    sites.codeload.add("/acme/skills/zip/main", make_zip({"README.md": b"# repo", **repo},
                                                         prefix="skills-main/"))
    response = api.post(BASE, json={"source": f"{sites.github.url}/acme/skills/tree/main/"
                                              "skills/gh-skill"})
    assert response.status_code == 201, response.json
    github = response.json["data"]
    assert (github["name"], github["version"]) == ("gh-skill", "2.1.0")

    listed = world["viewer"].get(BASE).json["data"]  # a viewer may read the catalog
    assert [e["name"] for e in listed] == ["gh-skill", "zip-skill"]

    files = api.get(f"{BASE}/{github['id']}/files").json["data"]
    assert [f["path"] for f in files] == ["SKILL.md", "assets/logo.png", "scripts/run.py"]
    text = api.get(f"{BASE}/{github['id']}/files/content?path=SKILL.md").json["data"]
    assert text["encoding"] == "utf-8" and "name: gh-skill" in text["content"]
    assert text["media_type"] == "text/markdown" and text["truncated"] is False
    image = api.get(f"{BASE}/{github['id']}/files/content?path=assets/logo.png").json["data"]
    assert image["encoding"] == "base64" and base64.b64decode(image["content"]) == PNG

    configs = [make_sandbox_config(world["a"].tenant) for _ in range(2)]
    response = api.post(f"{BASE}/{zipped['id']}/install", json={"sandbox_config_ids": configs})
    assert response.status_code == 202, response.json
    body = response.json
    assert body["success"] is True and "errors" not in body["data"]
    installs = body["data"]["installs"]
    assert set(installs) == set(configs)
    for config_id, skill_id in installs.items():
        row = db.session.get(InstalledSkill, skill_id)
        assert (row.sandbox_config_id, row.status, row.name) == \
            (config_id, InstallStatus.installing, "zip-skill")
        job = db.session.get(Job, row.job_id)
        assert (job.kind, job.params, job.status) == \
            ("install_skill", {"skill_id": skill_id}, JobStatus.pending)
    assert sorted(j for j, _ in world["jobs"].submitted) == \
        sorted(db.session.get(InstalledSkill, s).job_id for s in installs.values())

    catalog = {e["name"]: e for e in api.get(BASE).json["data"]}
    chips = catalog["zip-skill"]["installations"]
    assert {c["sandbox_config_id"] for c in chips} == set(configs)
    assert {c["status"] for c in chips} == {"installing"}


def test_the_install_job_ends_failed_with_a_readable_error_when_the_provider_is_down(world):
    """The job runs for real (tests/installs/ drive it on Docker); here the config's E2B
    endpoint is a closed loopback port, so the run fails at the maintenance sandbox."""
    entry = register_zip(world["admin"])
    config = make_sandbox_config(world["a"].tenant)
    response = world["admin"].post(f"{BASE}/{entry['id']}/install",
                                   json={"sandbox_config_ids": [config]})
    skill_id = response.json["data"]["installs"][config]
    job_id = db.session.get(InstalledSkill, skill_id).job_id
    assert run_job(job_id) == "failed"
    db.session.remove()
    row = db.session.get(InstalledSkill, skill_id)
    assert row.status == InstallStatus.failed
    assert row.error.startswith("The sandbox provider failed")
    assert "127.0.0.1" not in row.error  # no private address in what users read
    assert db.session.get(Job, job_id).error == row.error


def test_raw_zip_body_upload(world):
    data = make_zip(skill_files("raw-skill"))
    response = world["admin"].post(BASE, data=data, content_type="application/zip")
    assert response.status_code == 201, response.json
    assert response.json["data"]["name"] == "raw-skill"


def test_registering_a_name_again_updates_it_and_drops_the_unused_old_bundle(world):
    first = register_zip(world["admin"], version="1.0.0")
    old = stored_blobs(world["dir"])
    second = register_zip(world["admin"], version="1.1.0")
    assert second["id"] == first["id"] and second["version"] == "1.1.0"
    assert len(stored_blobs(world["dir"])) == 1 and stored_blobs(world["dir"]) != old
    assert count(SkillCatalogEntry) == 1


def test_an_install_pins_the_old_bundle_through_a_re_registration(world):
    first = register_zip(world["admin"], version="1.0.0")
    config = make_sandbox_config(world["a"].tenant)
    world["admin"].post(f"{BASE}/{first['id']}/install", json={"sandbox_config_ids": [config]})
    register_zip(world["admin"], version="2.0.0")
    assert len(stored_blobs(world["dir"])) == 2  # the install still names the old archive


def test_install_fan_out_with_some_failures_is_202_with_success_false(world):
    entry = register_zip(world["admin"])
    good = make_sandbox_config(world["a"].tenant)
    foreign = make_sandbox_config(world["b"].tenant)
    response = world["admin"].post(f"{BASE}/{entry['id']}/install", json={
        "sandbox_config_ids": [good, foreign, good, "not-a-config"]})
    assert response.status_code == 202
    body = response.json
    assert body["success"] is False
    assert list(body["data"]["installs"]) == [good]
    assert set(body["data"]["errors"]) == {foreign, "not-a-config"}
    assert "No such sandbox config" in body["data"]["errors"][foreign]
    assert count(InstalledSkill) == 1


def test_install_fan_out_where_every_target_fails_is_the_first_error(world):
    entry = register_zip(world["admin"])
    foreign = make_sandbox_config(world["b"].tenant)
    response = world["admin"].post(f"{BASE}/{entry['id']}/install",
                                   json={"sandbox_config_ids": [foreign]})
    assert response.status_code == 404 and response.json["error"]["code"] == "not_found"
    assert count(InstalledSkill) == 0 and count(Job) == 0


def test_an_empty_target_list_is_refused(world):
    entry = register_zip(world["admin"])
    response = world["admin"].post(f"{BASE}/{entry['id']}/install",
                                   json={"sandbox_config_ids": ["  "]})
    assert response.status_code == 400
    assert response.json["error"]["data"]["errors"][0]["message"] == \
        "Choose at least one sandbox config to install the skill on."


def test_installs_are_refused_while_the_workspace_kill_switch_is_on(world):
    entry = register_zip(world["admin"])
    config = make_sandbox_config(world["a"].tenant)
    world["a"].tenant.scripts_disabled = True
    db.session.commit()
    response = world["admin"].post(f"{BASE}/{entry['id']}/install",
                                   json={"sandbox_config_ids": [config]})
    assert response.status_code == 403
    assert response.json["error"]["code"] == "workspace_scripts_disabled"
    assert count(InstalledSkill) == 0 and count(Job) == 0


def test_a_repeat_install_dedupes_and_an_upgrade_keeps_serving_the_old_build(world):
    entry = register_zip(world["admin"], version="1.0.0")
    config = make_sandbox_config(world["a"].tenant)
    target = {"sandbox_config_ids": [config]}
    first = world["admin"].post(f"{BASE}/{entry['id']}/install", json=target).json["data"]
    again = world["admin"].post(f"{BASE}/{entry['id']}/install", json=target).json["data"]
    assert first == again and len(world["jobs"].submitted) == 1  # fresh in-flight install

    skill = db.session.get(InstalledSkill, first["installs"][config])
    skill.status, skill.installing_since = InstallStatus.ready, None
    db.session.commit()
    # Ready with the same sha but absent from the image (no snapshot): installed again.
    rebuilt = world["admin"].post(f"{BASE}/{entry['id']}/install", json=target).json["data"]
    assert rebuilt == first and len(world["jobs"].submitted) == 2
    skill.status, skill.installing_since = InstallStatus.ready, None
    skill.installed_snapshot_id = "sandlot/snapshot:present"
    row = db.session.get(SandboxConfig, config)
    row.config = {**row.config, "skill_image": {"snapshot_id": "sandlot/snapshot:present",
                                                "generation": 1}}
    db.session.commit()
    same = world["admin"].post(f"{BASE}/{entry['id']}/install", json=target).json["data"]
    assert same == first and len(world["jobs"].submitted) == 2  # ready, same sha, in image

    register_zip(world["admin"], version="1.1.0")
    world["admin"].post(f"{BASE}/{entry['id']}/install", json=target)
    db.session.refresh(skill)
    assert skill.status == InstallStatus.installing and skill.version == "1.1.0"
    assert skill.served["version"] == "1.0.0"
    available = world["viewer"].get("/api/v1/skills").json["data"]
    assert [(s["name"], s["version"], s["sandbox_config_ids"]) for s in available] == \
        [("demo-skill", "1.0.0", [config])]


def test_get_skills_lists_only_what_agents_can_use(world):
    entry = register_zip(world["admin"])
    config = make_sandbox_config(world["a"].tenant)
    world["admin"].post(f"{BASE}/{entry['id']}/install", json={"sandbox_config_ids": [config]})
    assert world["viewer"].get("/api/v1/skills").json["data"] == []
    row = db.session.scalar(select(InstalledSkill))
    row.status = InstallStatus.ready
    db.session.commit()
    skills = world["viewer"].get("/api/v1/skills").json["data"]
    assert skills[0]["name"] == "demo-skill" and skills[0]["catalog_id"] == entry["id"]
    row.enabled = False
    db.session.commit()
    assert world["viewer"].get("/api/v1/skills").json["data"] == []


def test_installs_without_a_catalog_row_are_synthesised(world):
    config = make_sandbox_config(world["a"].tenant)
    db.session.add(InstalledSkill(id="11111111-2222-3333-4444-555555555555",
                                  tenant_id=world["a"].tenant.id, sandbox_config_id=config,
                                  name="legacy", version="0.1.0", status=InstallStatus.ready,
                                  envs=[], created_at=utcnow(), updated_at=utcnow()))
    db.session.commit()
    [legacy] = world["viewer"].get(BASE).json["data"]
    assert legacy["id"] == "11111111-2222-3333-4444-555555555555"
    assert legacy["name"] == "legacy" and legacy["installations"][0]["status"] == "ready"


def test_delete_is_refused_while_installed_then_removes_row_and_blob(world):
    entry = register_zip(world["admin"])
    config = make_sandbox_config(world["a"].tenant)
    world["admin"].post(f"{BASE}/{entry['id']}/install", json={"sandbox_config_ids": [config]})
    response = world["admin"].delete(f"{BASE}/{entry['id']}")
    assert response.status_code == 409 and response.json["error"]["data"] == \
        {"sandbox_config_ids": [config]}
    db.session.delete(db.session.scalar(select(InstalledSkill)))
    db.session.commit()
    assert world["admin"].delete(f"{BASE}/{entry['id']}").status_code == 200
    assert stored_blobs(world["dir"]) == []
    assert world["admin"].get(f"{BASE}/{entry['id']}/files").status_code == 404
    assert register_zip(world["admin"])["id"] != entry["id"]  # the name is free again


def test_categories_accept_an_object_or_a_bare_list(world):
    entry = register_zip(world["admin"])
    url = f"{BASE}/{entry['id']}/categories"
    response = world["admin"].put(url, json={"categories": [" docs ", "pdf", "docs"]})
    assert response.status_code == 200 and response.json["data"]["categories"] == ["docs", "pdf"]
    assert world["admin"].put(url, json=["a"]).json["data"]["categories"] == ["a"]
    bad = world["admin"].put(url, json={"categories": ["", "x" * 65]})
    assert [e["field"] for e in bad.json["error"]["data"]["errors"]] == \
        ["categories[0]", "categories[1]"]


@pytest.mark.parametrize("path,status", [
    ("..%2Fx", 400), ("/etc/passwd", 400), ("scripts%5Crun.py", 400), ("a/../../b", 400),
    ("missing.txt", 404), ("scripts", 404),
])
def test_file_content_path_rules(world, path, status):
    entry = register_zip(world["admin"])
    response = world["admin"].get(f"{BASE}/{entry['id']}/files/content?path={path}")
    assert response.status_code == status, response.json


def test_file_content_truncates_text_and_flags_binary(world):
    big_text = "".join(f"line {i}: {i * 7919 % 104729}\n" for i in range(80_000)).encode()
    files = {"SKILL.md": skill_md(), "big.txt": big_text, "blob.dat": b"\x00\x01\x02",
             "latin1.txt": "caf\xe9".encode("latin-1")}
    response = upload(world["admin"], make_zip(files))
    assert response.status_code == 201, response.json
    entry_id = response.json["data"]["id"]
    text = world["admin"].get(f"{BASE}/{entry_id}/files/content?path=big.txt").json["data"]
    assert text["truncated"] is True and len(text["content"]) == 1024 * 1024
    assert text["size"] == len(big_text)
    for name in ("blob.dat", "latin1.txt"):
        binary = world["admin"].get(f"{BASE}/{entry_id}/files/content?path={name}").json["data"]
        assert (binary["binary"], binary["encoding"], binary["content"]) == (True, "binary", "")


def test_api_keys_are_refused_on_the_catalog_list(world, key_client):
    assert key_client(world["a"].tenant).get(BASE).status_code == 403
    assert key_client(world["a"].tenant).get("/api/v1/skills").status_code == 403


# ---------------------------------------------------------------- rejections store nothing

@pytest.mark.parametrize("data,match", [
    (make_zip({**skill_files(), "../evil": b"x"}), "escapes the archive root"),
    (zip_with_symlink(skill_files(), "scripts/x", "/etc/passwd"), "symlink"),
    (make_zip({**skill_files(), "/abs": b"x"}), "absolute path"),
    (make_zip({**skill_files(), "a\x07b": b"x"}), "control character"),
    (make_zip({"README": b"x"}), "no SKILL.md"),
    (make_zip({"a/SKILL.md": skill_md("a"), "b/SKILL.md": skill_md("b")}), "more than one"),
    (make_zip({"SKILL.md": skill_md(version="one")}), "not semver"),
    (make_zip({"SKILL.md": skill_md(), "bomb": b"\0" * (8 << 20)}), "zip bomb"),
    (make_zip(skill_files()).replace(b"PK\x05\x06", b"XX\x05\x06"), "not a readable zip"),
    (b"plain text, not a zip", "upload a .zip"),
])
def test_a_rejected_upload_stores_nothing(world, data, match):
    response = upload(world["admin"], data)
    assert response.status_code == 400, response.json
    error = response.json["error"]
    assert error["code"] == "skill_bundle_invalid" and match in error["message"]
    assert count(SkillCatalogEntry) == 0
    assert not world["dir"].exists() or stored_blobs(world["dir"]) == []


def test_a_bare_owner_slug_source_is_refused(world):
    response = world["admin"].post(BASE, json={"source": "alice/pdf-tools"})
    assert response.status_code == 400
    assert response.json["error"]["code"] == "skill_source_invalid"
    assert "@alice/pdf-tools" in response.json["error"]["message"]


def test_a_private_address_source_is_refused_before_connecting(world, app, monkeypatch):
    """The testing config keeps the SSRF guard on; a loopback source never gets a connection."""
    assert app.config["SKILL_SOURCES_ALLOW_PRIVATE"] is False
    site = skill_registry.FakeSite()
    try:
        site.add("/skill.zip", make_zip(skill_files()))
        response = world["admin"].post(BASE, json={"source": f"{site.url}/skill.zip"})
        assert response.status_code == 400
        assert "private, loopback or other special-use" in response.json["error"]["message"]
        assert site.connections == 0
    finally:
        site.stop()
    assert count(SkillCatalogEntry) == 0 and not world["dir"].exists()


def test_a_registry_ok_false_and_an_unreachable_registry_store_nothing(world, sites: Sites,
                                                                        monkeypatch):
    sites.clawhub.add_json("/api/v1/download?slug=banned", {"ok": False, "reason": "banned"})
    refused = world["admin"].post(BASE, json={"source": "banned"})
    assert refused.status_code == 400 and "refused: banned" in refused.json["error"]["message"]
    sites.clawhub.stop()
    down = world["admin"].post(BASE, json={"source": "anything"})
    assert down.status_code == 400 and "could not be fetched" in down.json["error"]["message"]
    assert count(SkillCatalogEntry) == 0 and not world["dir"].exists()


def test_a_source_body_over_64_kib_is_413(world):
    response = world["admin"].post(BASE, json={"source": "x" * (70 * 1024)})
    assert response.status_code == 413


def test_multipart_without_a_file_is_a_field_error(world):
    response = world["admin"].post(BASE, data={"other": "x"}, content_type="multipart/form-data")
    assert response.status_code == 400
    assert response.json["error"]["data"]["errors"] == [{"field": "file",
                                                         "message": "file is required"}]


def test_an_unknown_content_type_is_415(world):
    response = world["admin"].post(BASE, data="x", content_type="text/plain")
    assert response.status_code == 415


def test_a_source_archive_over_the_bundle_limit_is_413_and_stores_nothing(world, sites: Sites,
                                                                            app, monkeypatch):
    """Decisions 13: a download over the limit is refused as an oversize upload is."""
    monkeypatch.setitem(app.config, "MAX_SKILL_BUNDLE_SIZE_MB", 1)
    monkeypatch.setitem(app.config, "MAX_FILE_SIZE_MB", 1)
    sites.other.add("/big.zip", b"PK" + b"\0" * (2 << 20), chunked=True)
    response = world["admin"].post(BASE, json={"source": f"{sites.other.url}/big.zip"})
    assert response.status_code == 413, response.json
    assert response.json["error"] == {"code": "payload_too_large",
                                      "message": "skill bundle cannot exceed 1 MB"}
    assert count(SkillCatalogEntry) == 0 and not world["dir"].exists()
