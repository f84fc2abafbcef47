"""Sessions and exec against the real Docker engine (decisions 7, reference 9.1-9.2)."""

from __future__ import annotations

import threading

import pytest
import requests

from app.backends.docker import disk as docker_disk
from app.extensions import db
from app.models import SandboxConfig, SandboxSession
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.factories import config_doc
from tests.jobs.helpers import wait_for_terminal

CONFIGS = "/api/v1/sandbox-configs"


@pytest.fixture(autouse=True)
def _engine():
    require_docker()


@pytest.fixture
def world(two_tenants, bearer):
    a, b = two_tenants
    admin = bearer(a.admin, a.tenant)
    config = admin.post(CONFIGS, json={"name": "local", "config": config_doc(
        "docker", {"image": BASE_IMAGE, "network_mode": "none"},
        env_vars={"GREETING": "hello-from-config"})}).json["data"]
    member = bearer(a.contributor, a.tenant)
    return a, b, config, member, bearer


def open_session(api, config_id: str) -> str:
    response = api.post("/api/v1/sessions", json={"sandbox_config_id": config_id, "title": "t"})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


def run(api, session_id: str, command: str, **extra):
    return api.post(f"/api/v1/sessions/{session_id}/exec", json={"command": command, **extra})


def test_first_exec_creates_later_execs_reuse(world, engine):
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    first = run(member, session_id, "python3 -c 'print(1)'").json["data"]
    second = run(member, session_id, "python3 -c 'print(1)'").json["data"]
    assert first["stdout"] == second["stdout"] == "1\n"
    assert first["reused"] is False and second["reused"] is True
    assert first["sandbox_id"] == second["sandbox_id"]
    view = member.get(f"/api/v1/sessions/{session_id}").json["data"]
    assert view["sandbox_id"] == first["sandbox_id"] and view["exec_count"] == 2
    info = engine.get(first["sandbox_id"])
    assert info.metadata["sandlot_session_id"] == session_id
    assert info.metadata["sandlot_purpose"] == "session"


def test_state_persists_and_config_env_is_baked_in(world):
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    run(member, session_id, "echo kept > /workspace/note.txt")
    out = run(member, session_id, "cat /workspace/note.txt; echo $GREETING").json["data"]
    assert out["stdout"] == "kept\nhello-from-config\n"


def test_exit_code_stderr_and_timeout(world):
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    out = run(member, session_id, "echo oops >&2; exit 3").json["data"]
    assert out["exit_code"] == 3 and out["stderr"] == "oops\n"
    slow = run(member, session_id, "sleep 30", timeout_sec=1).json["data"]
    assert slow["timed_out"] is True and slow["exit_code"] != 0


def test_output_is_capped_with_a_marker(world):
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    out = run(member, session_id, "python3 -c 'print(\"x\" * 400000)'").json["data"]
    assert out["truncated"] is True
    assert out["stdout"].endswith("[output truncated: only the first 256 KiB are shown]\n")


def test_paused_sandbox_is_resumed_and_a_missing_one_is_gone_until_started_again(world, engine):
    """Decisions 17: a sandbox missing on its engine is reported gone, never silently
    replaced by an empty one (reference 9.1 replaces it: docs/deviations.md)."""
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    sandbox_id = run(member, session_id, "true").json["data"]["sandbox_id"]
    engine.pause(sandbox_id)
    resumed = run(member, session_id, "echo back").json["data"]
    assert resumed["sandbox_id"] == sandbox_id and resumed["stdout"] == "back\n"
    engine.delete(sandbox_id)

    refused = run(member, session_id, "echo new")
    assert refused.status_code == 409, refused.json
    assert refused.json["error"]["code"] == "sandbox_gone"
    assert "Start a new sandbox" in refused.json["error"]["message"]
    view = member.get(f"/api/v1/sessions/{session_id}").json["data"]
    assert view["binding_state"] == "gone" and view["sandbox_id"] is None
    assert view["engine"] == "local"
    assert engine.list({"sandlot_session_id": session_id}) == []  # nothing new was made
    again = run(member, session_id, "echo again")
    assert again.json["error"]["code"] == "sandbox_gone"  # until the member decides
    for refused in (member.get(f"/api/v1/sessions/{session_id}/files?path=/workspace"),
                    member.post(f"/api/v1/sessions/{session_id}/terminal-tickets")):
        assert refused.status_code == 409 and refused.json["error"]["code"] == "sandbox_gone"

    started = member.post(f"/api/v1/sessions/{session_id}/sandbox")
    assert started.status_code == 200, started.json
    fresh = started.json["data"]
    assert fresh["binding_state"] == "bound" and fresh["sandbox_id"] not in (None, sandbox_id)
    assert fresh["binding_version"] == 2
    after = run(member, session_id, "echo new").json["data"]
    assert after["sandbox_id"] == fresh["sandbox_id"] and after["reused"] is True


def test_starting_a_session_s_sandbox_keeps_a_live_one(world):
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    started = member.post(f"/api/v1/sessions/{session_id}/sandbox").json["data"]
    assert started["binding_state"] == "bound" and started["binding_version"] == 1
    again = member.post(f"/api/v1/sessions/{session_id}/sandbox").json["data"]
    assert again["sandbox_id"] == started["sandbox_id"] and again["binding_version"] == 1
    other = world[4](world[0].viewer, world[0].tenant)
    assert other.post(f"/api/v1/sessions/{session_id}/sandbox").status_code == 404


def test_a_sandbox_on_another_host_s_engine_is_never_replaced_here(world, engine):
    """Issue 28: host B answered 200 with a new, empty sandbox when the container was
    missing from the engine it talks to. A session records the engine that holds its
    sandbox; a host whose engine of that name is another one says where it is."""
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    sandbox_id = run(member, session_id, "echo kept > /tmp/mark").json["data"]["sandbox_id"]
    row = db.session.get(SandboxSession, session_id)
    assert row.engine == "local" and row.engine_uid  # the engine's own id, from the engine
    row.engine_uid = "an-engine-on-another-host"
    row.stale = True  # a skill install asks for a rebuild: still not this host's to do
    db.session.commit()

    refused = run(member, session_id, "cat /tmp/mark")
    assert refused.status_code == 409, refused.json
    assert refused.json["error"]["code"] == "sandbox_on_other_engine"
    assert "local" in refused.json["error"]["message"]
    files = member.get(f"/api/v1/sessions/{session_id}/files?path=/workspace")
    assert files.json["error"]["code"] == "sandbox_on_other_engine"
    restart = member.post(f"/api/v1/sessions/{session_id}/sandbox")
    assert restart.json["error"]["code"] == "sandbox_on_other_engine"
    assert [s.id for s in engine.list({"sandlot_session_id": session_id})] == [sandbox_id]
    view = member.get(f"/api/v1/sessions/{session_id}").json["data"]
    assert view["binding_state"] == "bound" and view["sandbox_id"] == sandbox_id


def test_a_paused_sandbox_whose_policy_another_host_keeps_is_not_resumed_here(world, engine):
    """Issue 28: a policed sandbox created on host A and paused could not be resumed from
    host B (A's egress state file is elsewhere), and B said only "a generic 503". B now
    says where the sandbox's policy is, and leaves the sandbox as it is."""
    from app.backends.docker.egress import dns, manager

    _, _, _, member, _ = world
    admin = world[4](world[0].admin, world[0].tenant)
    config = admin.post(CONFIGS, json={"name": "policed", "config": config_doc(
        "docker", {"image": BASE_IMAGE},
        network={"deny_egress_by_default": True, "allow_out": ["pypi.org"]})}).json["data"]
    session_id = open_session(member, config["id"])
    sandbox_id = run(member, session_id, "echo kept > /tmp/mark").json["data"]["sandbox_id"]
    engine.pause(sandbox_id)
    net_id = manager.egress_id_of(engine.api.inspect_container(sandbox_id))
    state = dns.sandboxes_dir(engine.egress.settings.state_dir) / f"{net_id}.json"
    held = state.read_bytes()
    state.unlink()  # as on host B, whose state directory never had it
    try:
        refused = run(member, session_id, "cat /tmp/mark")
        assert refused.status_code == 409, refused.json
        assert refused.json["error"]["code"] == "sandbox_on_other_host"
        assert "\u201clocal\u201d" in refused.json["error"]["message"]
        assert engine.get(sandbox_id).state.value == "paused"  # untouched, not replaced
    finally:
        state.write_bytes(held)  # back on "host A": it resumes with its policy
    resumed = run(member, session_id, "cat /tmp/mark").json["data"]
    assert resumed["sandbox_id"] == sandbox_id and resumed["stdout"] == "kept\n"


def test_lost_binding_is_recovered_by_metadata(world):
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    sandbox_id = run(member, session_id, "touch /workspace/mark").json["data"]["sandbox_id"]
    row = db.session.get(SandboxSession, session_id)
    row.binding_state, row.sandbox_id = "none", None
    db.session.commit()
    again = run(member, session_id, "ls /workspace/mark").json["data"]
    assert again["sandbox_id"] == sandbox_id and again["exit_code"] == 0


def test_concurrent_first_execs_create_exactly_one_sandbox(world, live_server, engine):
    a, _, config, _, _ = world
    token = requests.post(f"{live_server}/api/v1/auth/login", timeout=10, json={
        "email": a.contributor.email, "password": "correct-horse-battery",
        "tenant_id": a.tenant.id}).json()["data"]["token"]
    headers = {"Authorization": f"Bearer {token}"}
    session_id = requests.post(f"{live_server}/api/v1/sessions", headers=headers, timeout=10,
                               json={"sandbox_config_id": config["id"]}).json()["data"]["id"]
    results: list[dict] = []

    def first_exec():
        response = requests.post(f"{live_server}/api/v1/sessions/{session_id}/exec",
                                 headers=headers, timeout=120, json={"command": "hostname"})
        results.append(response.json()["data"])

    threads = [threading.Thread(target=first_exec) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(results) == 3
    assert len({r["sandbox_id"] for r in results}) == 1
    assert sorted(r["reused"] for r in results) == [False, True, True]
    live = engine.list({"sandlot_session_id": session_id})
    assert len(live) == 1


def test_delete_destroys_the_sandbox(world, engine):
    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    sandbox_id = run(member, session_id, "true").json["data"]["sandbox_id"]
    response = member.delete(f"/api/v1/sessions/{session_id}")
    assert response.status_code == 200
    assert member.get(f"/api/v1/sessions/{session_id}").status_code == 404  # closed at once
    assert wait_for_terminal(response.json["data"]["job_id"]).result == {"outcome": "removed"}
    assert engine.list({"sandlot_session_id": session_id}) == []
    assert sandbox_id


def test_kill_switch_and_cordon_refuse_exec(world, bearer):
    a, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    admin = bearer(a.admin, a.tenant)
    admin.put(f"{CONFIGS}/workspace-policy", json={"scripts_disabled": True})
    refused = run(member, session_id, "true")
    assert refused.status_code == 403
    assert refused.json["error"]["code"] == "workspace_scripts_disabled"
    admin.put(f"{CONFIGS}/workspace-policy", json={"scripts_disabled": False})
    from app.models.types import utcnow

    row = db.session.get(SandboxConfig, config["id"])
    row.cordoned_at = utcnow()
    db.session.commit()
    assert run(member, session_id, "true").json["error"]["code"] == "sandbox_config_cordoned"


def test_sessions_are_private_and_inputs_checked(world):
    a, b, config, member, bearer = world
    session_id = open_session(member, config["id"])
    other_member = bearer(a.viewer, a.tenant)
    assert other_member.get(f"/api/v1/sessions/{session_id}").status_code == 404
    assert run(other_member, session_id, "true").status_code == 404
    assert other_member.get("/api/v1/sessions").json["data"] == []
    foreign = bearer(b.admin, b.tenant)
    assert foreign.post("/api/v1/sessions",
                        json={"sandbox_config_id": config["id"]}).status_code == 404
    assert member.post("/api/v1/sessions",
                       json={"sandbox_config_id": "nope"}).status_code == 404
    empty = run(member, session_id, "")
    assert empty.status_code == 400 and empty.json["error"]["code"] == "validation_failed"
    huge = run(member, session_id, "x" * 20000)
    assert huge.json["error"]["data"]["errors"][0]["field"] == "command"


def test_backend_down_is_503_and_session_stays_consistent(two_tenants, bearer):
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    config = admin.post(CONFIGS, json={"name": "down", "config": {
        "sandbox_type": "docker",
        "docker": {"image": BASE_IMAGE, "engine": "missing"}}}).json
    session_id = open_session(admin, config["data"]["id"])
    response = run(admin, session_id, "true")
    assert response.status_code == 503
    assert response.json["error"]["code"] == "unavailable"
    assert "could not be reached" in response.json["error"]["message"]
    assert response.json["error"]["data"]["reference"] in response.json["error"]["message"]
    assert "/tmp/" not in response.json["error"]["message"]  # the operator's socket path
    row = db.session.get(SandboxSession, session_id)
    db.session.refresh(row)
    assert row.binding_state == "none" and row.sandbox_id is None


def test_idle_docker_sandbox_is_paused_then_resumed_on_next_exec(world, engine):
    from datetime import timedelta

    from app.models.types import utcnow
    from app.services.sessions import binding

    _, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    sandbox_id = run(member, session_id, "true").json["data"]["sandbox_id"]
    assert binding.pause_idle() == 0  # just used: not idle
    assert binding.pause_idle(utcnow() + timedelta(hours=1)) == 1
    assert engine.get(sandbox_id).state == "paused"
    again = run(member, session_id, "echo awake").json["data"]
    assert again["sandbox_id"] == sandbox_id and again["stdout"] == "awake\n"


def test_nul_in_title_is_a_field_error(world):
    _, _, config, member, _ = world
    response = member.post("/api/v1/sessions",
                           json={"sandbox_config_id": config["id"], "title": "a\u0000b"})
    assert response.status_code == 400
    assert response.json["error"]["data"]["errors"][0]["field"] == "title"


def test_exec_with_a_ready_skill_runs_in_its_dir_with_the_runtime_names(world, engine):
    import uuid as _uuid

    from app.models.skill import InstalledSkill, InstallStatus
    from app.models.types import utcnow

    a, _, config, member, _ = world
    session_id = open_session(member, config["id"])
    missing = run(member, session_id, "true", skill="report")
    assert missing.status_code == 404 and "report" in missing.json["error"]["message"]

    # What the install pipeline leaves behind: a ready row and the skill's files in place.
    db.session.add(InstalledSkill(id=str(_uuid.uuid4()), tenant_id=a.tenant.id,
                                  sandbox_config_id=config["id"], name="report", version="1.0.0",
                                  status=InstallStatus.ready, envs=[], created_at=utcnow(),
                                  updated_at=utcnow()))
    db.session.commit()
    sandbox_id = run(member, session_id, "true").json["data"]["sandbox_id"]
    engine.exec(sandbox_id, "mkdir -p /opt/weknora/tenant/skills/report", user="root")
    out = run(member, session_id, 'pwd; echo "$WEKNORA_SKILL_DIR $WEKNORA_SKILL_OUTPUT_DIR '
              '$WEKNORA_SESSION_INPUT_DIR $WEKNORA_SKILL_HISTORY_ROOT $NODE_PATH"',
              skill="report").json["data"]
    assert out["stdout"].splitlines() == [
        "/opt/weknora/tenant/skills/report",
        "/opt/weknora/tenant/skills/report /workspace/output /workspace/input /workspace/output "
        "/opt/weknora/tenant/skills/report/node_modules"]
    plain = run(member, session_id, 'echo "[$WEKNORA_SKILL_DIR]"').json["data"]
    assert plain["stdout"] == "[]\n"


def test_sandbox_changed_behind_the_apps_back_is_resumed_replaced_or_gone(world):
    """The exec path may trust a recent look at the sandbox (issue 11 item 7); a container
    paused, stopped or removed by someone else moments later must still be resumed
    (same sandbox, its files kept), replaced (stopped) or reported gone (removed), never
    a generic failure."""
    import docker

    _, _, config, member, _ = world
    raw = docker.APIClient(version="auto")
    removed_disk = None
    try:
        session_id = open_session(member, config["id"])
        sandbox_id = run(member, session_id, "echo kept > /tmp/mark").json["data"]["sandbox_id"]
        raw.pause(sandbox_id)
        resumed = run(member, session_id, "cat /tmp/mark")
        assert resumed.status_code == 200, resumed.json
        assert resumed.json["data"]["sandbox_id"] == sandbox_id
        assert resumed.json["data"]["stdout"] == "kept\n"
        raw.stop(sandbox_id, timeout=0)
        stopped = run(member, session_id, "echo after-stop")
        assert stopped.status_code == 200, stopped.json
        assert stopped.json["data"]["stdout"] == "after-stop\n"
        replaced_id = stopped.json["data"]["sandbox_id"]
        # Its loop disk outlives it, as when an operator removes a sandbox: the app's
        # orphan sweep releases such disks at its next start; this test releases its own.
        removed_disk = docker_disk.disk_of(raw.inspect_container(replaced_id))
        raw.remove_container(replaced_id, force=True)
        removed = run(member, session_id, "echo after-remove")  # gone: decisions 17
        assert removed.status_code == 409, removed.json
        assert removed.json["error"]["code"] == "sandbox_gone"
    finally:
        docker_disk.release(removed_disk)
        raw.close()
