"""Personal variables reach a real skill run on Docker (reference 8.4, decisions 7): the
caller's value beats the workspace's, another member keeps the workspace value, missing
required names refuse the run, unreadable own values refuse it, capture never overwrites."""

from __future__ import annotations

from sqlalchemy import Text, select, type_coerce, update

from app.extensions import db
from app.models import InstalledSkill, PersonalEnvVar
from tests.installs.conftest import docker_config, install_zip, open_session, skill_zip, wait_for

EXEC_PATHS = True  # through the exec agent and through docker exec (tests/exec_paths.py)

ME = "/api/v1/me/env-vars"
INSTALL_SH = b"""#!/bin/sh
set -e
mkdir -p .weknora
cat > .weknora/requirements.json <<'JSON'
[{"name": "API_TOKEN", "description": "your token", "required": true},
 {"name": "REGION", "description": "where"},
 {"name": "CAPTURED", "description": "learnt from a run"}]
JSON
"""
SHOW = b'#!/bin/sh\necho "token=$API_TOKEN region=$REGION wide=$WIDE captured=$CAPTURED"\n'


def exec_(api, session_id, command, skill="personal"):
    body = {"command": command, **({"skill": skill} if skill else {})}
    return api.post(f"/api/v1/sessions/{session_id}/exec", json=body)


def out(api, session_id, command="sh show.sh", skill="personal"):
    response = exec_(api, session_id, command, skill)
    assert response.status_code == 200, response.json
    return response.json["data"]["stdout"].strip()


def put(api, skill_id, name, value):
    response = api.put(f"{ME}/skill", json={"skill_id": skill_id, "name": name, "value": value})
    assert response.status_code == 200, response.json


def test_members_values_reach_their_own_runs_only(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin)
    data = skill_zip("personal", {"install.sh": INSTALL_SH, "show.sh": SHOW})
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]
    row = wait_for(skill_id, deadline_sec=120)
    assert row.status == "ready", row.error
    assert [e["name"] for e in row.envs] == ["API_TOKEN", "REGION", "CAPTURED"]
    row.env_values = {"REGION": "ws-region"}
    db.session.commit()
    mine, theirs = open_session(member, config["id"]), open_session(admin, config["id"])

    # A required name unset everywhere refuses the run and names it; nothing ran.
    refused = exec_(member, mine, "touch /tmp/ran")
    assert refused.status_code == 400, refused.json
    assert refused.json["error"]["code"] == "missing_env"
    assert "API_TOKEN" in refused.json["error"]["message"]
    assert refused.json["error"]["data"] == {"missing_env": ["API_TOKEN"]}
    assert out(member, mine, "test -e /tmp/ran && echo ran || echo not-run", None) == "not-run"

    put(member, skill_id, "API_TOKEN", "member-token")
    put(member, skill_id, "REGION", "member-region")
    assert member.put(f"{ME}/sandbox", json={"sandbox_config_id": config["id"], "name": "WIDE",
                                             "value": "member-wide"}).status_code == 200
    put(admin, skill_id, "API_TOKEN", "admin-token")
    assert out(member, mine) == ("token=member-token region=member-region wide=member-wide "
                                 "captured=")
    response = exec_(member, mine, "true")
    assert response.json["data"]["missing_env"] == []
    assert out(admin, theirs) == "token=admin-token region=ws-region wide= captured="
    # A plain exec sees only the config-wide layer.
    assert out(member, mine, 'echo "$WIDE/$API_TOKEN"', None) == "member-wide/"

    # Clearing falls back to the workspace value.
    assert member.delete(f"{ME}/skill", json={"skill_id": skill_id,
                                              "name": "REGION"}).status_code == 200
    assert out(member, mine).startswith("token=member-token region=ws-region")

    # Capture: only after success, only where no layer has a value, never overwriting.
    assert exec_(member, mine, "export CAPTURED=failed-run; exit 3").json["data"][
        "exit_code"] == 3
    assert _own(member_id=world["a"].contributor.id, name="CAPTURED") is None
    out(member, mine, "export CAPTURED=learnt REGION=hallucinated; true")
    assert _own(world["a"].contributor.id, "CAPTURED") == "learnt"
    assert _own(world["a"].contributor.id, "REGION") is None  # the workspace has one
    out(member, mine, "export CAPTURED=overwrite-attempt; true")
    assert _own(world["a"].contributor.id, "CAPTURED") == "learnt"
    assert out(member, mine).endswith("captured=learnt")
    assert out(admin, theirs).endswith("captured=")  # the admin's run never sees it

    # An own value that no longer decrypts refuses the run instead of using the workspace's.
    db.session.execute(update(PersonalEnvVar).where(PersonalEnvVar.name == "API_TOKEN",
                       PersonalEnvVar.principal_id == str(world["a"].contributor.id))
                       .values(value=type_coerce("gAAAAAbroken", Text)))
    db.session.commit()
    refused = exec_(member, mine, "touch /tmp/ran2")
    assert refused.status_code == 409 and "API_TOKEN" in refused.json["error"]["message"]
    assert out(admin, theirs).startswith("token=admin-token")  # others are unaffected
    assert out(member, mine, "test -e /tmp/ran2 && echo ran || echo not-run", None) == "not-run"
    assert db.session.get(InstalledSkill, skill_id) is not None


def test_a_required_name_set_in_the_configs_env_vars_is_not_missing(world):
    """Reference 8.4 (its later fix): create-time config env vars satisfy a required name;
    the sandbox already has the value, so the run neither refuses nor captures it."""
    admin, member = world["admin"], world["member"]
    config = docker_config(admin, "baked", env_vars={"API_TOKEN": "baked-token"})
    data = skill_zip("personal", {"install.sh": INSTALL_SH, "show.sh": SHOW})
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]
    assert wait_for(skill_id, deadline_sec=120).status == "ready"
    mine = open_session(member, config["id"])

    response = exec_(member, mine, "sh show.sh; export API_TOKEN=hallucinated")
    assert response.status_code == 200, response.json
    assert response.json["data"]["missing_env"] == []
    assert response.json["data"]["stdout"].startswith("token=baked-token region=")
    assert _own(world["a"].contributor.id, "API_TOKEN") is None  # never captured
    # A member's own value still wins over the sandbox's (it sits underneath everything).
    put(member, skill_id, "API_TOKEN", "member-token")
    assert out(member, mine).startswith("token=member-token")


def _own(member_id, name):
    db.session.remove()
    row = db.session.scalar(select(PersonalEnvVar).where(
        PersonalEnvVar.principal_id == str(member_id), PersonalEnvVar.name == name))
    return row.value if row else None


def test_uninstalling_a_skill_deletes_members_values_scoped_to_it(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin)
    data = skill_zip("personal", {"install.sh": INSTALL_SH, "show.sh": SHOW})
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]
    assert wait_for(skill_id, deadline_sec=120).status == "ready"
    put(member, skill_id, "API_TOKEN", "member-token")
    put(admin, skill_id, "REGION", "admin-region")
    assert member.put(f"{ME}/sandbox", json={"sandbox_config_id": config["id"], "name": "WIDE",
                                             "value": "stays"}).status_code == 200
    removed = admin.delete(f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}")
    assert removed.status_code == 202, removed.json
    wait_for(skill_id, gone=True, deadline_sec=120)
    db.session.remove()
    left = db.session.scalars(select(PersonalEnvVar)).all()
    assert [(r.skill_id, r.name) for r in left] == [("", "WIDE")]
