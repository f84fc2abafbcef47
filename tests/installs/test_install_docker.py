"""Skill installs on the real Docker engine (reference 7.2, 9.1, 9.3; decisions 8)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import AuditEvent, SandboxConfig, SkillInstallEvent, SkillSnapshot
from tests.backends.conftest import BASE_IMAGE
from tests.installs.conftest import (
    docker_config,
    install_zip,
    open_session,
    run,
    skill_zip,
    wait_for,
)

INSTALL_SH = b"""#!/bin/sh
set -e
echo "building the tool"
mkdir -p bin
printf '#!/bin/sh\\necho "tool says $GREETING_NAME"\\n' > bin/tool
chmod 755 bin/tool
mkdir -p .weknora
# The second name is assembled here, so it never occurs literally in the bundle.
made_up="NOT_IN""_BUNDLE"
printf '[{"name": "GREETING_NAME", "description": "who to greet", "required": true}, ' \\
    >.weknora/requirements.json
printf '{"name": "%s"}, {"name": "PATH"}]' "$made_up" >> .weknora/requirements.json
# Tried where every session's scratch is (reference 7.2 step 16 wipes it): the installer
# is root without capabilities, and the sandbox user owns /workspace, so nothing lands.
echo install-scratch > /workspace/input/left.txt 2>/dev/null || true
echo install-scratch > /workspace/output/left.txt 2>/dev/null || true
"""


def test_install_sh_skill_is_built_into_the_image_and_a_new_session_runs_it(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin)
    data = skill_zip("greeter", {"install.sh": INSTALL_SH,
                                 "scripts/hello.py": b"import os\nprint('GREETING_NAME')\n"})
    response = install_zip(admin, config["id"], data)
    assert response.status_code == 202, response.json
    skill_id = response.json["data"]["skill_id"]

    row = wait_for(skill_id)
    assert row.status == "ready", row.error
    finished = db.session.scalars(select(AuditEvent).where(
        AuditEvent.action == "installed_skill.installed")).all()
    assert [(e.object_id, e.actor_label, e.data["name"]) for e in finished] == [
        (skill_id, "installer", "greeter")]  # issue 27 item 10: the end is in the activity
    view = admin.get(f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}").json["data"]
    assert view["status"] == "ready" and view["installed_snapshot_id"]
    # Only a name that occurs in the bundle and is not reserved is kept (reference 7.4).
    assert view["envs"] == [{"name": "GREETING_NAME", "description": "who to greet",
                             "required": True, "is_set": False, "needs_reentry": False}]
    stored = db.session.get(SandboxConfig, config["id"]).config["skill_image"]
    assert stored["snapshot_id"] == view["installed_snapshot_id"] and stored["generation"] == 1
    ledger = db.session.scalars(select(SkillSnapshot)).all()
    assert [(r.state, r.trigger) for r in ledger] == [("active", "install")]
    stages = [e.stage for e in db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.skill_id == skill_id).order_by(SkillInstallEvent.seq))]
    for stage in ("accepted", "sandbox_ready", "seeding", "seeded", "agent", "agent_done",
                  "verified", "done"):
        assert stage in stages
    assert stages[-1] == "done"

    patched = admin.patch(f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}",
                          json={"envs": {"GREETING_NAME": "world-canary-7731"}})
    assert patched.status_code == 200, patched.json
    assert "world-canary-7731" not in patched.get_data(as_text=True)
    assert patched.json["data"]["envs"][0]["is_set"] is True

    session_id = open_session(member, config["id"])
    out = run(member, session_id, "bin/tool; pwd; echo $WEKNORA_SKILL_DIR", skill="greeter")
    assert out["exit_code"] == 0, out
    assert out["stdout"].splitlines() == [
        "tool says world-canary-7731", "/opt/weknora/tenant/skills/greeter",
        "/opt/weknora/tenant/skills/greeter"]
    scratch = run(member, session_id, "ls -A /workspace/input /workspace/output")
    assert scratch["stdout"].split() == ["/workspace/input:", "/workspace/output:"], scratch


REQUIREMENTS_SCRIPT = b"""import os
import sandlot_tiny
print(sandlot_tiny.VALUE, os.environ.get("TINY_TOKEN", "unset"))
"""


def require_venv(engine) -> None:
    """The plan's `python3 -m venv` needs ensurepip: sandbox image recipe 4 or later."""
    labels = engine.api.inspect_image(BASE_IMAGE)["Config"].get("Labels") or {}
    if int(labels.get("sandlot.recipe") or 0) < 4:
        pytest.fail(f"{BASE_IMAGE} predates recipe 4 (python3-venv); run "
                    "`bash scripts/sandbox-image.sh base` from this branch")


def test_requirements_skill_installs_from_the_allowed_local_index_into_its_venv(
        world, package_index):
    require_venv(world["engine"])
    admin, member = world["admin"], world["member"]
    config = docker_config(
        admin, "with-index", docker={"network_mode": "bridge"},
        network={"deny_egress_by_default": True, "allow_out": [package_index.ip]},
        env_vars={"PIP_INDEX_URL": package_index.url, "PIP_TRUSTED_HOST": package_index.ip})
    data = skill_zip("tiny-user", {
        "requirements.txt": b"sandlot-tiny==1.0.0\n", "scripts/show.py": REQUIREMENTS_SCRIPT},
        frontmatter="env:\n  - name: TINY_TOKEN\n    description: a token\n    required: true")
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]

    row = wait_for(skill_id)
    assert row.status == "ready", row.error
    commands = [e.message for e in db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.skill_id == skill_id, SkillInstallEvent.kind == "command"))]
    assert commands[0] == "python3 -m venv .venv"
    assert commands[1].endswith("-r requirements.txt")
    base = f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}"
    assert admin.patch(base, json={"envs": {"TINY_TOKEN": "tiny-canary-5512"}}).status_code == 200

    session_id = open_session(member, config["id"])
    out = run(member, session_id, "python scripts/show.py", skill="tiny-user")
    assert out["exit_code"] == 0, out
    assert out["stdout"] == f"{package_index.value} tiny-canary-5512\n"
    # Outside the skill the package is not on the interpreter's path: it is the skill's.
    plain = run(member, session_id, "python3 -c 'import sandlot_tiny'")
    assert plain["exit_code"] != 0


def test_the_skill_image_carries_no_config_secret(world):
    """Config env vars reach the installer's commands but are never baked into the
    snapshot, so a secret the admin later changes or removes does not live on in it."""
    admin, engine = world["admin"], world["engine"]
    secret = "config-secret-canary-4417"
    config = docker_config(admin, env_vars={"INSTALL_TOKEN": secret})
    script = b"#!/bin/sh\n[ -n \"$INSTALL_TOKEN\" ] && echo token-seen > seen.txt\n"
    skill_id = install_zip(admin, config["id"], skill_zip("tokened", {"install.sh": script})
                           ).json["data"]["skill_id"]
    row = wait_for(skill_id)
    assert row.status == "ready", row.error
    inspected = engine.api.inspect_image(row.installed_snapshot_id)
    assert secret not in str(inspected["Config"]) and secret not in str(inspected)
    events = " ".join(e.message for e in db.session.scalars(select(SkillInstallEvent)))
    assert secret not in events
    session_id = open_session(world["member"], config["id"])
    seen = run(world["member"], session_id, "cat seen.txt", skill="tokened")
    assert seen["stdout"] == "token-seen\n"  # the installer's command did see the value


DECLARING_SH = b"""#!/bin/sh
mkdir -p .weknora
if [ "$DECLARE" = broken ]; then
    printf '{"env": [' > .weknora/requirements.json
else
    printf '{"env": [{"name": "GREETING_NAME", "required": true}]}' > .weknora/requirements.json
fi
"""


def test_a_reinstall_without_a_usable_declaration_keeps_the_declared_names_and_values(world):
    """Reference 7.4 on reinstall: an unparseable declaration keeps what the skill had, so
    the admin's value still satisfies the required name (it was dropped, and the member
    was then refused)."""
    admin, member = world["admin"], world["member"]
    config = docker_config(admin, "redeclared")
    skill_id = install_zip(admin, config["id"], skill_zip(
        "redeclared", {"install.sh": DECLARING_SH})).json["data"]["skill_id"]
    assert wait_for(skill_id).status == "ready"
    base = f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}"
    assert admin.patch(base, json={"envs": {"GREETING_NAME": "kept-7301"}}).status_code == 200
    body = admin.get(f"/api/v1/sandbox-configs/{config['id']}").json["data"]
    body["config"]["env_vars"] = {"DECLARE": "broken"}
    assert admin.put(f"/api/v1/sandbox-configs/{config['id']}",
                     json={"name": body["name"], "config": body["config"]}).status_code == 200

    notes = "use the internal mirror 7301"
    assert admin.post(f"{base}/reinstall", json={"instructions": notes}).status_code == 202
    row = wait_for(skill_id)
    assert row.status == "ready"
    # The admin's notes open this run's transcript (they were written to a run nobody
    # reads); the installer itself stays deterministic (decisions 8).
    first = db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.run_id == row.install_message_id)
        .order_by(SkillInstallEvent.seq)).first()
    assert (first.kind, first.stage) == ("note", "accepted") and notes in first.message
    runs = set(db.session.scalars(select(SkillInstallEvent.run_id).where(
        SkillInstallEvent.skill_id == skill_id)))
    assert len(runs) == 2  # the install and the reinstall, no third "notes" run

    view = admin.get(base).json["data"]
    assert [(e["name"], e["required"], e["is_set"]) for e in view["envs"]] == [
        ("GREETING_NAME", True, True)]
    out = run(member, open_session(member, config["id"]), "echo $GREETING_NAME",
              skill="redeclared")
    assert out["stdout"] == "kept-7301\n", out
