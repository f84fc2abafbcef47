"""Several skills on one config: serialised installs, uninstall of one then the last,
stop mid-install, and a stale session rebuilt at its next exec (reference 7.2, 7.6, 9.2)."""

from __future__ import annotations

import threading
import time

from sqlalchemy import select

from app.extensions import db
from app.models import InstalledSkill, SandboxConfig, SkillInstallEvent, SkillSnapshot
from tests.installs.conftest import (
    docker_config,
    install_boxes,
    install_zip,
    open_session,
    run,
    skill_zip,
    wait_for,
)


def script(name: str, seconds: float = 0) -> bytes:
    return f"#!/bin/sh\nsleep {seconds}\necho {name} > marker.txt\n".encode()


def image_of(config_id: str) -> dict:
    db.session.remove()
    return db.session.get(SandboxConfig, config_id).config.get("skill_image") or {}


def test_two_installs_at_once_take_turns_and_the_image_has_both(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin)
    results = {}

    def install(name: str) -> None:
        response = install_zip(admin, config["id"], skill_zip(name, {"install.sh":
                                                                     script(name, 1)}))
        results[name] = response.json["data"]["skill_id"]

    threads = [threading.Thread(target=install, args=(n,)) for n in ("alpha", "beta")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = [wait_for(results[n]) for n in ("alpha", "beta")]
    assert [r.status for r in rows] == ["ready", "ready"], [r.error for r in rows]

    # Serialised: one run's snapshot is the other's parent; generations 1 and 2.
    ledger = db.session.scalars(select(SkillSnapshot).order_by(SkillSnapshot.generation)).all()
    assert [(r.generation, r.state) for r in ledger] == [(1, "superseded"), (2, "active")]
    assert ledger[1].parent_snapshot_id == ledger[0].snapshot_id
    assert image_of(config["id"])["snapshot_id"] == ledger[1].snapshot_id
    session_id = open_session(member, config["id"])
    for name in ("alpha", "beta"):
        assert run(member, session_id, "cat marker.txt", skill=name)["stdout"] == f"{name}\n"


def test_uninstall_one_of_two_rebuilds_then_the_last_clears_the_pointer(world):
    admin, member, engine = world["admin"], world["member"], world["engine"]
    config = docker_config(admin)
    ids = {}
    for name in ("keep", "drop"):
        ids[name] = install_zip(admin, config["id"], skill_zip(name, {"install.sh": script(
            name)})).json["data"]["skill_id"]
        assert wait_for(ids[name]).status == "ready"
    base = f"/api/v1/sandbox-configs/{config['id']}/skills"

    response = admin.delete(f"{base}/{ids['drop']}")
    assert response.status_code == 202 and response.json["data"] == {"skill_id": ids["drop"]}
    wait_for(ids["drop"], gone=True)
    assert [s["name"] for s in admin.get(base).json["data"]] == ["keep"]
    image = image_of(config["id"])
    assert image["generation"] == 3 and image["snapshot_id"]
    session_id = open_session(member, config["id"])
    assert run(member, session_id, "cat marker.txt", skill="keep")["stdout"] == "keep\n"
    gone = run(member, session_id, "ls /opt/weknora/tenant/skills")["stdout"].split()
    assert gone == ["keep"]
    stages = [e.stage for e in db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.skill_id == ids["drop"]).order_by(SkillInstallEvent.id))][-4:]
    assert stages == ["accepted", "sandbox_ready", "removed", "done"]

    assert admin.delete(f"{base}/{ids['keep']}").status_code == 202
    wait_for(ids["keep"], gone=True)
    image = image_of(config["id"])
    assert image["snapshot_id"] is None and image["generation"] == 4
    assert admin.get(base).json["data"] == []
    # The catalog entries can go now that nothing is installed.
    for entry in admin.get("/api/v1/skills/catalog").json["data"]:
        assert admin.delete(f"/api/v1/skills/catalog/{entry['id']}").status_code == 200
    # The session was marked stale; its next exec boots from the plain template.
    out = run(member, session_id, "ls /opt/weknora/tenant/skills 2>&1; echo done")
    assert out["reused"] is False and out["stdout"].endswith("done\n")
    assert "keep" not in out["stdout"]
    assert install_boxes(engine) == []


def test_stop_mid_install_kills_the_run_and_the_row_says_so(world):
    admin = world["admin"]
    config = docker_config(admin)
    data = skill_zip("slow", {"install.sh": b"#!/bin/sh\necho working\nsleep 300\n"})
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]
    base = f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the command is running
        db.session.remove()
        if db.session.scalar(select(SkillInstallEvent).where(
                SkillInstallEvent.skill_id == skill_id, SkillInstallEvent.kind == "command")):
            break
        time.sleep(0.2)
    started = time.monotonic()
    stopped = admin.post(f"{base}/stop")
    assert stopped.status_code == 200, stopped.json
    assert (stopped.json["data"]["status"], stopped.json["data"]["error"]) == (
        "failed", "install stopped")
    row = wait_for(skill_id, deadline_sec=30)
    assert time.monotonic() - started < 20  # the 300 s command did not run to its end
    assert (row.status, row.error) == ("failed", "install stopped")
    assert install_boxes(world["engine"]) == []
    assert db.session.scalars(select(SkillSnapshot)).all() == []
    # Stop on a failed skill returns it unchanged; on a ready one it is a 400.
    assert admin.post(f"{base}/stop").json["data"]["status"] == "failed"
    again = install_zip(admin, config["id"], skill_zip("slow", {"install.sh": script("ok")}))
    assert again.json["data"]["skill_id"] == skill_id
    assert wait_for(skill_id).status == "ready"
    refused = admin.post(f"{base}/stop")
    assert refused.status_code == 400 and refused.json["error"]["message"] == \
        "This skill is not installing, so there is nothing to stop."


def test_a_live_session_goes_stale_on_install_and_is_rebuilt_at_its_next_exec(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin)
    session_id = open_session(member, config["id"])
    first = run(member, session_id, "echo before")
    skill_id = install_zip(admin, config["id"], skill_zip("late", {"install.sh": script(
        "late")})).json["data"]["skill_id"]
    assert wait_for(skill_id).status == "ready"
    db.session.remove()
    from app.models import SandboxSession

    assert db.session.get(SandboxSession, session_id).stale is True
    after = run(member, session_id, "cat marker.txt", skill="late")
    assert after["stdout"] == "late\n" and after["sandbox_id"] != first["sandbox_id"]
    assert after["reused"] is False


def test_disabled_skill_is_hidden_and_cannot_run(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin)
    skill_id = install_zip(admin, config["id"], skill_zip("quiet", {"install.sh": script(
        "quiet")})).json["data"]["skill_id"]
    assert wait_for(skill_id).status == "ready"
    base = f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}"
    assert admin.patch(base, json={"enabled": False}).json["data"]["enabled"] is False
    assert [s["name"] for s in member.get("/api/v1/skills").json["data"]] == []
    session_id = open_session(member, config["id"])
    refused = member.post(f"/api/v1/sessions/{session_id}/exec",
                          json={"command": "true", "skill": "quiet"})
    assert refused.status_code == 404
    assert db.session.get(InstalledSkill, skill_id).installed_snapshot_id  # still in the image


def test_a_run_in_flight_blocks_a_template_change(world):
    """`skill_snapshot_blocks_template` counts installing and removing skills, not only a
    finished image: the run in flight is baking one for the current template."""
    admin = world["admin"]
    config = docker_config(admin)
    data = skill_zip("pinning", {"install.sh": b"#!/bin/sh\nsleep 300\n"})
    skill_id = install_zip(admin, config["id"], data).json["data"]["skill_id"]
    body = {"name": "local", "config": {"sandbox_type": "docker", "docker": {
        "image": "sandlot/sandbox:busybox", "network_mode": "none"}}}
    refused = admin.put(f"/api/v1/sandbox-configs/{config['id']}", json=body)
    assert refused.status_code == 409
    assert refused.json["error"]["code"] == "skill_snapshot_blocks_template"
    stopped = admin.post(f"/api/v1/sandbox-configs/{config['id']}/skills/{skill_id}/stop")
    assert stopped.status_code == 200
    assert wait_for(skill_id).status == "failed"


def test_deleting_a_config_releases_its_snapshots_and_its_skills(world):
    admin, engine = world["admin"], world["engine"]
    config = docker_config(admin)
    ids = [install_zip(admin, config["id"], skill_zip(n, {"install.sh": script(n)})
                       ).json["data"]["skill_id"] for n in ("one", "two")]
    assert [wait_for(i).status for i in ids] == ["ready", "ready"]
    snapshots = [r.snapshot_id for r in db.session.scalars(select(SkillSnapshot))]
    assert len(snapshots) == 2 and all(engine.api.images(name=s) for s in snapshots)

    deleted = admin.delete(f"/api/v1/sandbox-configs/{config['id']}")
    assert deleted.status_code == 200, deleted.json
    db.session.remove()
    assert [r.state for r in db.session.scalars(select(SkillSnapshot))] == ["deleted"] * 2
    assert not any(engine.api.images(name=s) for s in snapshots)
    assert all(db.session.get(InstalledSkill, i).deleted_at is not None for i in ids)
    for entry in admin.get("/api/v1/skills/catalog").json["data"]:
        assert entry["installations"] == []
        assert admin.delete(f"/api/v1/skills/catalog/{entry['id']}").status_code == 200


def test_new_session_rollout_leaves_live_sessions_alone(world):
    admin, member = world["admin"], world["member"]
    config = docker_config(admin, skill_rollout="new_session")
    old_session = open_session(member, config["id"])
    before = run(member, old_session, "echo before")
    skill_id = install_zip(admin, config["id"], skill_zip("later", {"install.sh": script(
        "later")})).json["data"]["skill_id"]
    assert wait_for(skill_id).status == "ready"
    from app.models import SandboxSession

    db.session.remove()
    assert db.session.get(SandboxSession, old_session).stale is False
    kept = run(member, old_session, "ls /opt/weknora/tenant/skills 2>&1; echo end")
    assert kept["sandbox_id"] == before["sandbox_id"] and "later" not in kept["stdout"]
    fresh = open_session(member, config["id"])
    assert run(member, fresh, "cat marker.txt", skill="later")["stdout"] == "later\n"
