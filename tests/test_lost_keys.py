"""Issue 14 item 5: a lost or rotated-away key blanks only the secrets it sealed.

Rows are written under the test key, then the app runs with a new key only (the old one
deleted from SECRETS_KEYS): nothing may answer 500, every unreadable secret reads as
unset and is flagged "needs re-entry", entering it again repairs it, and rotation reports
the rows it could not read by id (never by value) instead of stopping.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.errors import AppError
from app.extensions import db
from app.models import InstalledSkill, PersonalEnvVar, SandboxConfig
from app.models.personal_env import CONFIG_WIDE, PRINCIPAL_USER
from app.services import audit
from app.services.personal import resolver
from app.services.personal import values as personal_env
from app.services.sandboxes import configs as service
from app.services.sandboxes import document as sandbox_doc
from tests.factories import config_doc
from tests.sweeps import secrets as planted
from tests.sweeps.routes import make_installed_skill

pytestmark = pytest.mark.usefixtures("private_endpoints")

BASE = "/api/v1/sandbox-configs"
E2B_KEY, ENV_VALUE, HEADER_VALUE = "lost-e2b-key-3c1d", "lost-env-value-77a0", "lost-hdr-9e2f"


@pytest.fixture
def world(two_tenants):
    a, _ = two_tenants
    docker = service.create_config(a.tenant, audit.SystemActor("tests"), "Docker", "",
                                   config_doc("docker", env_vars={"TOKEN": ENV_VALUE,
                                                                  "OTHER": "other-value"}))
    e2b = service.create_config(a.tenant, audit.SystemActor("tests"), "E2B", "", config_doc(
        "e2b", {"api_key": E2B_KEY},
        network={"allow_out": ["api.example.com"], "deny_egress_by_default": True,
                 "e2b_host_rules": [{"host": "api.example.com",
                                     "headers": {"X-Key": HEADER_VALUE}}]}))
    return a, docker.id, e2b.id


@pytest.fixture
def new_key(app) -> Iterator[list[str]]:
    """From here on SECRETS_KEYS holds one new key: the one the rows were sealed with is
    gone. Nothing loaded before is reused. Yields the old keys (to write "old" rows)."""
    old = list(app.config["SECRETS_KEYS"])
    db.session.expire_all()
    with planted.using_keys(app, [planted.new_key()]):
        yield old
        db.session.rollback()


def test_the_config_api_lists_reads_and_flags_lost_secrets(world, bearer, new_key):
    a, docker_id, e2b_id = world
    api = bearer(a.admin, a.tenant)

    listed = api.get(BASE)
    assert listed.status_code == 200, listed.json
    by_id = {c["id"]: c for c in listed.json["data"]}
    assert by_id[docker_id]["secrets_need_reentry"] == ["env_vars.OTHER", "env_vars.TOKEN"]
    assert by_id[docker_id]["config"]["env_vars"] == {"OTHER": "", "TOKEN": ""}
    assert by_id[docker_id]["config"]["docker"]["image"] == "sandlot/sandbox:base"

    one = api.get(f"{BASE}/{e2b_id}")
    assert one.status_code == 200, one.json
    data = one.json["data"]
    assert data["secrets_need_reentry"] == ["e2b.api_key",
                                            "network.e2b_host_rules[0].headers.X-Key"]
    assert data["config"]["e2b"]["api_key"] == ""
    assert data["config"]["e2b"]["api_url"] == "http://127.0.0.1:9"  # the rest still reads
    body = listed.get_data(as_text=True) + one.get_data(as_text=True)
    assert "gAAAAA" not in body  # not even the unreadable tokens


def test_saving_without_re_entering_a_lost_secret_is_a_field_error(world, bearer, new_key):
    a, docker_id, _ = world
    api = bearer(a.admin, a.tenant)
    config = api.get(f"{BASE}/{docker_id}").json["data"]["config"]

    response = api.put(f"{BASE}/{docker_id}", json={"name": "Docker", "config": config})
    assert response.status_code == 400, response.json
    fields = {e["field"]: e["message"] for e in response.json["error"]["data"]["errors"]}
    assert set(fields) == {"env_vars.TOKEN", "env_vars.OTHER"}
    assert "re-enter" in fields["env_vars.TOKEN"]


def test_entering_the_secret_again_repairs_it(world, bearer, new_key):
    a, docker_id, _ = world
    api = bearer(a.admin, a.tenant)
    config = api.get(f"{BASE}/{docker_id}").json["data"]["config"]
    config["env_vars"] = {"TOKEN": "fresh-value"}  # OTHER removed, TOKEN typed again

    response = api.put(f"{BASE}/{docker_id}", json={"name": "Docker", "config": config})
    assert response.status_code == 200, response.json
    assert response.json["data"]["secrets_need_reentry"] == []
    db.session.expire_all()
    row = db.session.get(SandboxConfig, docker_id)
    assert row.config["env_vars"] == {"TOKEN": "fresh-value"}


def test_a_lost_api_key_is_asked_for_again_and_repairs_with_force(world, bearer, new_key):
    """The API key is identity: the old account cannot be listed without it, so the save
    is the unverifiable-inventory 409 of decisions 10 until forced."""
    a, _, e2b_id = world
    api = bearer(a.admin, a.tenant)
    config = api.get(f"{BASE}/{e2b_id}").json["data"]["config"]
    config["network"]["e2b_host_rules"][0]["headers"]["X-Key"] = "new-header"

    refused = api.put(f"{BASE}/{e2b_id}", json={"name": "E2B", "config": config})
    assert refused.status_code == 400
    assert [e["field"] for e in refused.json["error"]["data"]["errors"]] == ["e2b.api_key"]

    config["e2b"]["api_key"] = "new-api-key"
    response = api.put(f"{BASE}/{e2b_id}?force=true", json={"name": "E2B", "config": config})
    assert response.status_code == 200, response.json
    assert response.json["data"]["secrets_need_reentry"] == []


def test_the_sandboxes_page_and_the_editor_work_and_say_needs_re_entry(world, login_as,
                                                                     new_key):
    a, docker_id, e2b_id = world
    client = login_as(a.admin, a.tenant)

    page = client.get("/sandboxes")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "Docker" in html and "E2B" in html
    assert html.count("Secrets need re-entry</span>") == 2
    for config_id, count in ((docker_id, 2), (e2b_id, 2)):
        editor = client.get(f"/sandboxes/{config_id}/edit")
        assert editor.status_code == 200
        html = editor.get_data(as_text=True)
        assert html.count("Needs re-entry: the stored value can no longer be read") == count
        assert "gAAAAA" not in html


def test_the_editor_repairs_a_lost_env_value(world, login_as, new_key):
    from tests.web._support import post_form

    a, docker_id, _ = world
    client = login_as(a.admin, a.tenant)
    form = {"name": "Docker", "sandbox_type": "docker", "docker.image": "sandlot/sandbox:base",
            "docker.engine": "local", "env_vars[0].key": "TOKEN", "env_vars[0].value": "",
            "env_vars[1].key": "OTHER", "env_vars[1].value": "typed-again"}
    refused = post_form(client, f"/sandboxes/{docker_id}/edit", form)
    assert refused.status_code == 400
    assert "re-enter this secret" in refused.get_data(as_text=True)

    form["env_vars[0].value"] = "typed-again-too"
    saved = post_form(client, f"/sandboxes/{docker_id}/edit", form)
    assert saved.status_code in (200, 204, 302), saved.get_data(as_text=True)[:500]
    db.session.expire_all()
    assert db.session.get(SandboxConfig, docker_id).config["env_vars"] == {
        "TOKEN": "typed-again-too", "OTHER": "typed-again"}


def test_a_sandbox_gets_no_lost_env_value(world, new_key):
    _, docker_id, _ = world
    row = db.session.get(SandboxConfig, docker_id)
    spec = sandbox_doc.spec_for(row.config, {})
    assert "TOKEN" not in spec.env and "OTHER" not in spec.env


def test_a_row_written_back_keeps_its_unreadable_tokens(app, world, new_key):
    """A server-owned write (a skill image pointer) must not wipe what the old key could
    still open: restoring that key brings the secrets back."""
    _, docker_id, _ = world
    row = db.session.get(SandboxConfig, docker_id)
    doc = dict(row.config)
    doc["skill_image"] = {"snapshot_id": "snap-1", "generation": 1}
    row.config = doc
    db.session.commit()
    db.session.expire_all()
    with planted.using_keys(app, new_key):
        restored = db.session.get(SandboxConfig, docker_id).config
        assert restored["env_vars"] == {"TOKEN": ENV_VALUE, "OTHER": "other-value"}
        assert restored["skill_image"]["snapshot_id"] == "snap-1"
        db.session.expire_all()


def test_skill_env_values_that_no_longer_decrypt_count_as_unset_and_are_flagged(
        app, world, bearer, new_key):
    a, docker_id, _ = world
    api = bearer(a.admin, a.tenant)
    with planted.using_keys(app, new_key):  # written under the old key
        skill_id = make_installed_skill(a.tenant, docker_id, secret="skill-admin-value")
    db.session.expire_all()

    shown = api.get(f"{BASE}/{docker_id}/skills/{skill_id}")
    assert shown.status_code == 200, shown.json
    assert shown.json["data"]["envs"] == [{"name": "SWEEP_ENV", "description": "",
                                           "required": False, "is_set": False,
                                           "needs_reentry": True}]
    listed = api.get(f"{BASE}/{docker_id}/skills")
    assert listed.status_code == 200, listed.json
    assert "skill-admin-value" not in listed.get_data(as_text=True)

    skill = db.session.get(InstalledSkill, skill_id)
    resolution = resolver.resolve(personal_env.Who.user(a.tenant, a.admin), docker_id,
                                      skill)
    assert "SWEEP_ENV" not in resolution.env and "SWEEP_ENV" in resolution.capturable


def test_personal_values_that_no_longer_decrypt_do_not_500(app, world, login_as, bearer,
                                                          new_key):
    """Members' own values: unset through the ORM, flagged on their page and API, and a
    run refuses with the named 409 (personal_env_needs_reentry), not a 500."""
    a, docker_id, _ = world
    with planted.using_keys(app, new_key):
        db.session.add(PersonalEnvVar(
            id="00000000-0000-4000-8000-00000000abcd", tenant_id=a.tenant.id,
            principal_type=PRINCIPAL_USER, principal_id=str(a.admin.id),
            sandbox_config_id=docker_id, skill_id=CONFIG_WIDE, name="MINE",
            value="personal-value"))
        db.session.commit()
    db.session.expire_all()
    assert db.session.get(PersonalEnvVar, "00000000-0000-4000-8000-00000000abcd").value == ""
    page = login_as(a.admin, a.tenant).get("/personal-variables")
    assert page.status_code == 200
    with pytest.raises(AppError) as refused:
        resolver.resolve(personal_env.Who.user(a.tenant, a.admin), docker_id, None)
    assert refused.value.code == "personal_env_needs_reentry"


def test_rotate_reports_unreadable_rows_by_id_and_goes_on(app, world, new_key):
    a, docker_id, e2b_id = world
    fresh = service.create_config(a.tenant, audit.SystemActor("tests"), "Fresh", "", {
        "sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:base"},
        "env_vars": {"K": "fresh-secret"}})
    db.session.expire_all()
    with planted.using_keys(app, [planted.new_key(), *app.config["SECRETS_KEYS"]]):
        result = app.test_cli_runner().invoke(args=["secrets", "rotate"])
        assert result.exit_code == 0, result.output
        db.session.expire_all()
        assert db.session.get(SandboxConfig, fresh.id).config["env_vars"] == {"K": "fresh-secret"}
    assert "sandbox_configs.config: 1 re-encrypted" in result.output
    unreadable = [line for line in result.output.splitlines()
                  if line.startswith("sandbox_configs.config: 2 rows hold values no key opens")]
    assert len(unreadable) == 1, result.output
    assert docker_id in unreadable[0] and e2b_id in unreadable[0] and fresh.id not in unreadable[0]
    assert "total: 2 rows could not be read" in result.output
    for value in (ENV_VALUE, E2B_KEY, HEADER_VALUE, "fresh-secret", "gAAAAA"):
        assert value not in result.output


@pytest.fixture
def legacy_lost(two_tenants) -> tuple:
    """A docker config stored the old way (the whole document as one token) under a key
    that is gone: written raw, as the migration leaves a row no key opens."""
    import json
    import uuid

    from cryptography.fernet import Fernet
    from sqlalchemy import Text, type_coerce

    from app.models.types import utcnow

    a, _ = two_tenants
    token = Fernet(planted.new_key()).encrypt(json.dumps({
        "sandbox_type": "docker", "docker": {"image": "img"},
        "env_vars": {"T": "legacy-secret"}}).encode()).decode()
    row_id = str(uuid.uuid4())
    table = SandboxConfig.__table__
    db.session.execute(table.insert().values(
        id=row_id, tenant_id=a.tenant.id, name="Legacy", description="",
        sandbox_type="docker", config=type_coerce(token, Text), created_at=utcnow(),
        updated_at=utcnow()))
    db.session.commit()
    return a, row_id, token


def test_an_unreadable_whole_document_row_still_lists_and_can_be_re_entered(
        legacy_lost, bearer, login_as):
    a, row_id, token = legacy_lost
    api = bearer(a.admin, a.tenant)
    listed = api.get(BASE)
    assert listed.status_code == 200, listed.json
    (data,) = [c for c in listed.json["data"] if c["id"] == row_id]
    assert data["secrets_need_reentry"] == ["config"] and data["sandbox_type"] == "docker"
    assert api.get(f"{BASE}/{row_id}").status_code == 200

    client = login_as(a.admin, a.tenant)
    page = client.get("/sandboxes")
    assert page.status_code == 200 and "Settings need re-entry" in page.get_data(as_text=True)
    editor = client.get(f"/sandboxes/{row_id}/edit")
    assert editor.status_code == 200
    assert "stored settings can no longer be read" in editor.get_data(as_text=True)

    repaired = api.put(f"{BASE}/{row_id}", json={"name": "Legacy", "config": {
        "sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:base"},
        "env_vars": {"T": "typed-again"}}})
    assert repaired.status_code == 200, repaired.json
    assert repaired.json["data"]["secrets_need_reentry"] == []
    db.session.expire_all()
    assert db.session.get(SandboxConfig, row_id).config["env_vars"] == {"T": "typed-again"}


def test_an_unreadable_whole_document_row_is_written_back_unchanged(legacy_lost):
    from sqlalchemy import Text, select, type_coerce

    _, row_id, token = legacy_lost
    row = db.session.get(SandboxConfig, row_id)
    row.description = "touched"
    row.config = row.config  # an unrelated save that carries the document along
    db.session.commit()
    raw = db.session.scalar(select(type_coerce(SandboxConfig.__table__.c.config, Text))
                            .where(SandboxConfig.id == row_id))
    assert raw == token
