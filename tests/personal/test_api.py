"""GET/PUT/DELETE /api/v1/me/env-vars (reference 3.4, 8; decisions 9): validation, identity
from the signed-in member only, values never returned."""

from __future__ import annotations

import pytest
from sqlalchemy import Text, select, type_coerce, update

from app.extensions import db
from app.models import PersonalEnvVar
from tests.personal.helpers import ME, config, declare, new_id, skill, unready

SECRET = "personal-canary-4f1c"


@pytest.fixture
def w(two_tenants, bearer):
    a, b = two_tenants
    cfg = config(a.tenant, "alpha")
    sk = skill(a.tenant, cfg, declare("API_TOKEN", required=True) + declare("REGION"),
               {"REGION": "workspace-region"}, name="weather")
    return a, b, cfg, sk, bearer(a.contributor, a.tenant), bearer(a.viewer, a.tenant)


def put_skill(api, skill_id, name, value=SECRET, **extra):
    return api.put(f"{ME}/skill", json={"skill_id": skill_id, "name": name, "value": value,
                                        **extra})


def put_wide(api, config_id, name, value=SECRET):
    return api.put(f"{ME}/sandbox", json={"sandbox_config_id": config_id, "name": name,
                                          "value": value})


def groups(api):
    response = api.get(ME)
    assert response.status_code == 200, response.json
    assert SECRET not in response.get_data(as_text=True)
    return response.json["data"]


def skill_vars(data, skill_id):
    return {v["name"]: v for g in data for s in g["skills"] if s["skill_id"] == skill_id
            for v in s["vars"]}


def error(response, status):
    assert response.status_code == status, response.json
    assert response.json["success"] is False
    return response.json["error"]["message"]


def test_listing_shape_order_and_sources(w):
    a, _, cfg, sk, member, _ = w
    empty = config(a.tenant, "zulu")
    first = config(a.tenant, "Aardvark")
    data = groups(member)
    names = [g["sandbox_config_name"] for g in data]
    assert names == sorted(names) and {"alpha", "zulu", "Aardvark"} <= set(names)
    zulu = next(g for g in data if g["sandbox_config_id"] == empty)
    assert zulu["vars"] == [] and zulu["skills"] == []
    assert first in {g["sandbox_config_id"] for g in data}
    view = skill_vars(data, sk.id)
    assert list(view) == ["API_TOKEN", "REGION"]  # declaration order
    assert view["API_TOKEN"]["source"] == "unset" and view["API_TOKEN"]["required"] is True
    assert view["REGION"]["source"] == "workspace" and view["REGION"]["updated_at"] is None
    assert put_skill(member, sk.id, "REGION").status_code == 200
    assert put_wide(member, cfg, "ZED").status_code == 200
    assert put_wide(member, cfg, "ALPHA").status_code == 200
    data = groups(member)
    mine = skill_vars(data, sk.id)["REGION"]
    assert mine["source"] == "user" and mine["updated_at"]
    wide = next(g for g in data if g["sandbox_config_id"] == cfg)["vars"]
    assert [v["name"] for v in wide] == ["ALPHA", "ZED"]
    assert all(v["source"] == "user" for v in wide)


def test_skills_listed_only_when_enabled_ready_and_declaring(w):
    a, _, cfg, sk, member, _ = w
    nodecl = skill(a.tenant, cfg, [], name="plain")
    off = skill(a.tenant, cfg, declare("X"), name="off", enabled=False)
    broken = skill(a.tenant, cfg, declare("X"), name="broken")
    unready(broken)
    listed = {s["skill_id"] for g in groups(member) for s in g["skills"]}
    assert sk.id in listed and not listed & {nodecl.id, off.id, broken.id}


def test_other_member_sees_the_workspace_value_not_mine(w, bearer):
    a, _, _, sk, member, _ = w
    assert put_skill(member, sk.id, "REGION").status_code == 200
    other = bearer(a.admin, a.tenant)
    assert skill_vars(groups(other), sk.id)["REGION"]["source"] == "workspace"


def test_fields_naming_someone_else_or_the_other_scope_are_ignored_never_obeyed(w, bearer):
    """Reference 8.1: the body has no principal; what the reference's clients send beside
    it (a principal, a user id, the other scope's id) is ignored, not refused, and never
    obeyed: the value is the signed-in member's, on the scope the route names."""
    a, _, cfg, sk, member, _ = w
    admin = bearer(a.admin, a.tenant)
    other = config(a.tenant, "beta")
    assert put_skill(admin, sk.id, "API_TOKEN", "admins-own").status_code == 200
    naming_the_admin = {"principal_id": str(a.admin.id), "principal_type": "user",
                        "user_id": a.admin.id, "sandbox_config_id": other}
    assert put_skill(member, sk.id, "API_TOKEN", "members-own",
                     **naming_the_admin).status_code == 200
    wide = member.put(f"{ME}/sandbox", json={"sandbox_config_id": cfg, "name": "WIDE",
                                             "value": "members-wide", "skill_id": sk.id,
                                             "principal_id": str(a.admin.id)})
    assert wide.status_code == 200, wide.json
    rows = db.session.scalars(select(PersonalEnvVar)).all()
    assert sorted((r.principal_id, r.sandbox_config_id, r.skill_id, r.name) for r in rows) == \
        sorted([(str(a.admin.id), cfg, sk.id, "API_TOKEN"),
                (str(a.contributor.id), cfg, sk.id, "API_TOKEN"),
                (str(a.contributor.id), cfg, "", "WIDE")])
    assert skill_vars(groups(admin), sk.id)["API_TOKEN"]["source"] == "user"
    # Deleting "the admin's" value deletes the member's own; the admin's stays.
    assert member.delete(f"{ME}/skill", json={"skill_id": sk.id, "name": "API_TOKEN",
                                              **naming_the_admin}).status_code == 200
    db.session.expire_all()
    assert sorted(r.value for r in db.session.scalars(select(PersonalEnvVar))) == [
        "admins-own", "members-wide"]
    # Other routes still refuse what they do not know.
    assert admin.patch(f"/api/v1/sandbox-configs/{cfg}/skills/{sk.id}",
                       json={"enabled": True, "user_id": 1}).status_code == 400


def test_a_member_cannot_delete_or_overwrite_another_members_value(w, bearer):
    a, _, cfg, sk, member, _ = w
    admin = bearer(a.admin, a.tenant)
    assert put_skill(admin, sk.id, "API_TOKEN", "admins-own").status_code == 200
    assert put_wide(admin, cfg, "SHARED", "admins-wide").status_code == 200
    assert "not set" in error(member.delete(f"{ME}/skill", json={
        "skill_id": sk.id, "name": "API_TOKEN"}), 404)
    assert error(member.delete(f"{ME}/sandbox", json={
        "sandbox_config_id": cfg, "name": "SHARED"}), 404)
    assert put_skill(member, sk.id, "API_TOKEN", "members-own").status_code == 200
    rows = db.session.scalars(select(PersonalEnvVar).where(
        PersonalEnvVar.name == "API_TOKEN")).all()
    assert sorted(r.value for r in rows) == ["admins-own", "members-own"]
    assert skill_vars(groups(admin), sk.id)["API_TOKEN"]["source"] == "user"


def test_another_workspace_cannot_use_or_see_our_rows(w, bearer):
    a, b, cfg, sk, member, _ = w
    outsider = bearer(b.owner, b.tenant)
    assert "not available" in error(put_skill(outsider, sk.id, "API_TOKEN"), 400)
    assert "not available" in error(put_wide(outsider, cfg, "X"), 400)
    assert cfg not in {g["sandbox_config_id"] for g in groups(outsider)}
    assert db.session.scalar(select(PersonalEnvVar.id)) is None


@pytest.mark.parametrize("name", ["lower", "1ABC", "A-B", "A" * 129, "", "   "])
def test_bad_names_are_refused(w, name):
    _, _, cfg, sk, member, _ = w
    error(put_wide(member, cfg, name), 400)
    error(put_skill(member, sk.id, name), 400)


@pytest.mark.parametrize("name", ["PATH", "HOME", "USER", "SHELL", "LD_PRELOAD",
                                  "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME",
                                  "NODE_OPTIONS", "NODE_PATH", "WEKNORA_SKILL_DIR",
                                  "WEKNORA_SESSION_INPUT_DIR", "WEKNORA_SKILL_ANYTHING"])
def test_reserved_names_are_refused_in_both_scopes(w, name):
    a, _, cfg, _, member, _ = w
    declaring = skill(a.tenant, cfg, declare(name), name="declares-reserved")
    assert "reserved" in error(put_wide(member, cfg, name), 400)
    assert "reserved" in error(put_skill(member, declaring.id, name), 400)


def test_weknora_names_are_refused_sandbox_wide(w):
    _, _, cfg, _, member, _ = w
    assert "WEKNORA_" in error(put_wide(member, cfg, "WEKNORA_TOKEN"), 400)


def test_values_must_be_non_empty_and_at_most_8192_bytes(w):
    _, _, cfg, sk, member, _ = w
    assert "delete API_TOKEN to clear it" in error(put_skill(member, sk.id, "API_TOKEN", ""), 400)
    error(put_wide(member, cfg, "X", ""), 400)
    error(member.put(f"{ME}/sandbox", json={"sandbox_config_id": cfg, "name": "X"}), 400)
    assert "8192" in error(put_wide(member, cfg, "X", "é" * 4097), 400)  # 8194 bytes
    assert put_wide(member, cfg, "X", "x" * 8192).status_code == 200


def test_missing_scope_or_name_and_bad_json(w):
    _, _, cfg, sk, member, _ = w
    assert error(member.put(f"{ME}/skill", json={"name": "A", "value": "v"}), 400) \
        == "skill_id and name are required"
    assert error(member.put(f"{ME}/sandbox", json={"sandbox_config_id": cfg, "value": "v"}),
                 400) == "sandbox_config_id and name are required"
    assert error(member.delete(f"{ME}/skill", json={"skill_id": sk.id}), 400)
    bad = member.put(f"{ME}/sandbox", data="{nope", content_type="application/json")
    error(bad, 400)


def test_fifty_names_per_scope_and_overwrite_is_exempt(w):
    _, _, cfg, _, member, _ = w
    for i in range(50):
        assert put_wide(member, cfg, f"V{i}").status_code == 200
    assert "50" in error(put_wide(member, cfg, "ONE_MORE"), 400)
    assert put_wide(member, cfg, "V7", "rotated").status_code == 200


def test_skill_must_be_usable_and_declare_the_name(w):
    a, _, cfg, sk, member, _ = w
    assert "does not declare NOPE" in error(put_skill(member, sk.id, "NOPE"), 400)
    off = skill(a.tenant, cfg, declare("X"), name="off", enabled=False)
    assert "not available" in error(put_skill(member, off.id, "X"), 400)
    failed = skill(a.tenant, cfg, declare("X"), name="failed")
    unready(failed)
    assert "not available" in error(put_skill(member, failed.id, "X"), 400)
    assert "not available" in error(put_skill(member, new_id(), "X"), 400)


def test_the_config_comes_from_the_skill_row(w):
    a, _, _, sk, member, _ = w
    other = config(a.tenant, "other")
    response = member.put(f"{ME}/skill", json={"skill_id": sk.id, "name": "API_TOKEN",
                                               "value": "v", "sandbox_config_id": other})
    assert response.status_code == 200, response.json  # not a field of this body: ignored
    row = db.session.scalar(select(PersonalEnvVar))
    assert row.sandbox_config_id == sk.sandbox_config_id and row.skill_id == sk.id


def test_delete_works_on_a_disabled_skill_and_unset_is_404(w):
    _, _, cfg, sk, member, _ = w
    assert put_skill(member, sk.id, "API_TOKEN").status_code == 200
    sk.enabled = False
    db.session.commit()
    body = {"skill_id": sk.id, "name": "API_TOKEN"}
    assert member.delete(f"{ME}/skill", json=body).json == {"success": True, "data": None}
    assert error(member.delete(f"{ME}/skill", json=body), 404) \
        == "this environment variable is not set"
    assert error(member.delete(f"{ME}/sandbox", json={"sandbox_config_id": cfg,
                                                       "name": "X"}), 404)


def test_viewer_can_set_their_own_values(w):
    _, _, cfg, sk, _, viewer = w
    assert put_skill(viewer, sk.id, "API_TOKEN").status_code == 200
    assert put_wide(viewer, cfg, "MINE").status_code == 200
    assert viewer.delete(f"{ME}/sandbox", json={"sandbox_config_id": cfg,
                                                "name": "MINE"}).status_code == 200


def test_api_keys_are_refused(w, key_client):
    a, _, cfg, sk, _, _ = w
    key = key_client(a.tenant)
    assert key.get(ME).status_code == 403
    assert put_skill(key, sk.id, "API_TOKEN").status_code == 403
    assert put_wide(key, cfg, "X").status_code == 403
    assert db.session.scalar(select(PersonalEnvVar.id)) is None


def test_values_are_stored_encrypted(w):
    _, _, cfg, _, member, _ = w
    assert put_wide(member, cfg, "X").status_code == 200
    (token,) = _tokens()
    assert SECRET not in token


def test_a_value_that_no_longer_decrypts_reads_as_needing_reentry(w):
    _, _, cfg, sk, member, _ = w
    assert put_skill(member, sk.id, "REGION").status_code == 200
    assert put_wide(member, cfg, "OK_ONE").status_code == 200
    db.session.execute(update(PersonalEnvVar).where(PersonalEnvVar.name == "REGION")
                       .values(value=type_coerce("gAAAAAbroken-token", Text)))
    db.session.commit()
    data = groups(member)
    region = skill_vars(data, sk.id)["REGION"]
    assert region["source"] == "workspace" and region["needs_reentry"] is True
    wide = next(g for g in data if g["sandbox_config_id"] == cfg)["vars"]
    assert wide[0]["name"] == "OK_ONE" and wide[0]["needs_reentry"] is False
    assert put_skill(member, sk.id, "REGION", "fresh").status_code == 200  # re-entry fixes it
    assert skill_vars(groups(member), sk.id)["REGION"]["needs_reentry"] is False


def _tokens() -> list[str]:
    return sorted(db.session.scalars(select(type_coerce(PersonalEnvVar.value, Text))))


def test_deleting_a_config_deletes_members_values_scoped_to_it(w, bearer):
    a, _, cfg, sk, member, _ = w
    keep = config(a.tenant, "kept")
    assert put_skill(member, sk.id, "API_TOKEN").status_code == 200
    assert put_wide(member, cfg, "GOES").status_code == 200
    assert put_wide(member, keep, "STAYS").status_code == 200
    admin = bearer(a.admin, a.tenant)
    # The sweep config's provider is a closed loopback port: its inventory is unverifiable.
    response = admin.delete(f"/api/v1/sandbox-configs/{cfg}?force=true")
    assert response.status_code == 200, response.json
    db.session.expire_all()
    left = db.session.scalars(select(PersonalEnvVar)).all()
    assert [(r.sandbox_config_id, r.name) for r in left] == [(keep, "STAYS")]
    assert cfg not in {g["sandbox_config_id"] for g in groups(member)}
