"""Warm pools (issue 29 item 2) on the real Docker engine: a pool serves new sessions
without a create, refills, drains on a policy change or when its config goes, is never
handed to two sessions, holds the deployment's memory (not a member's quota), and is off
after an hour without new sessions."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import delete, select, update

from app.backends.base import SandboxNotFound
from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.models import PoolSandbox, PoolState, SandboxConfig, SandboxSession, WarmPool
from app.models.types import utcnow
from app.services import quotas
from app.services.sandboxes import egress_log, pools
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.factories import config_doc

CONFIGS = "/api/v1/sandbox-configs"


@pytest.fixture(autouse=True)
def _engine():
    require_docker()


def pool_doc(size: int = 2, **overrides):
    return config_doc("docker", {"image": BASE_IMAGE, "network_mode": "none",
                                 "warm_pool_size": size}, **overrides)


@pytest.fixture
def world(two_tenants, bearer):
    a, _ = two_tenants
    admin = bearer(a.admin, a.tenant)
    config = admin.post(CONFIGS, json={"name": "pooled", "config": pool_doc()}).json["data"]
    return a, admin, config, bearer(a.contributor, a.tenant)


def open_session(api, config_id: str) -> str:
    response = api.post("/api/v1/sessions", json={"sandbox_config_id": config_id})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


def first_exec(api, session_id: str) -> dict:
    response = api.post(f"/api/v1/sessions/{session_id}/exec",
                        json={"command": "echo $HOME; id -un"})
    assert response.status_code == 200, response.json
    return response.json["data"]


def rows(config_id: str, *states: PoolState) -> list[PoolSandbox]:
    db.session.expire_all()
    query = select(PoolSandbox).where(PoolSandbox.config_id == config_id)
    if states:
        query = query.where(PoolSandbox.state.in_(states))
    return list(db.session.scalars(query))


def fill(config_id: str, size: int) -> set[str]:
    """Tend until the pool has `size` ready sandboxes; their ids."""
    for _ in range(size + 2):
        pools.tend()
        ready = rows(config_id, PoolState.ready)
        if len(ready) == size:
            return {r.sandbox_id for r in ready}
    raise AssertionError(f"pool did not fill: {[(r.state, r.sandbox_id) for r in rows(config_id)]}")


def exists(engine: DockerBackend, sandbox_id: str) -> bool:
    try:
        engine.get(sandbox_id)
    except SandboxNotFound:
        return False
    return True


def test_a_pool_of_two_serves_two_new_sessions_without_a_create_and_refills(world, engine,
                                                                              monkeypatch):
    a, admin, config, member = world
    first = open_session(member, config["id"])  # the pool is wanted from now on
    waiting = fill(config["id"], 2)
    creates = []
    real_create = DockerBackend.create
    monkeypatch.setattr(DockerBackend, "create",
                        lambda self, spec: creates.append(spec) or real_create(self, spec))
    second = open_session(member, config["id"])
    served = {first_exec(member, s)["sandbox_id"] for s in (first, second)}
    assert served == waiting and not creates  # both from the pool: no create on the way
    out = first_exec(member, first)
    assert out["stdout"] == "/home/sandbox\nsandbox\n" and out["reused"] is True
    claimed = {r.session_id: r.sandbox_id for r in rows(config["id"], PoolState.claimed)}
    assert set(claimed) == {first, second}
    # The sessions own them now: the inventory names both, and the pool refills.
    inventory = admin.get(f"{CONFIGS}/{config['id']}/sandboxes").json["data"]
    assert sorted(inventory["session_ids"]) == sorted([first, second])
    assert inventory["sandbox_count"] == 2
    monkeypatch.setattr(DockerBackend, "create", real_create)
    refilled = fill(config["id"], 2)
    assert not refilled & waiting
    inventory = admin.get(f"{CONFIGS}/{config['id']}/sandboxes").json["data"]
    assert inventory["sandbox_count"] == 2  # waiting ones are the pool's, not live sessions'
    # Ending a session removes its sandbox; its pool row goes with the keeper's next pass.
    assert member.delete(f"/api/v1/sessions/{first}").status_code in (200, 204)
    pools.tend()
    assert not exists(engine, claimed[first])
    assert {r.session_id for r in rows(config["id"], PoolState.claimed)} == {second}


def test_concurrent_first_commands_never_share_a_pool_sandbox(world):
    _, _, config, member = world
    sessions = [open_session(member, config["id"]) for _ in range(4)]
    db.session.execute(update(WarmPool).values(last_session_at=utcnow()))
    db.session.commit()
    pools.tend()  # one pass: one ready sandbox for four sessions at once
    (waiting,) = {r.sandbox_id for r in rows(config["id"], PoolState.ready)}
    got: dict[str, str] = {}
    start = threading.Barrier(len(sessions))

    def go(session_id: str) -> None:
        start.wait()
        got[session_id] = first_exec(member, session_id)["sandbox_id"]

    threads = [threading.Thread(target=go, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(got) == 4 and len(set(got.values())) == 4
    assert list(got.values()).count(waiting) == 1
    (row,) = rows(config["id"], PoolState.claimed)
    assert got[row.session_id] == waiting


def test_a_policy_change_drains_the_pool(world, engine):
    _, admin, config, member = world
    open_session(member, config["id"])
    before = fill(config["id"], 2)
    changed = admin.put(f"{CONFIGS}/{config['id']}", json={
        "name": "pooled", "config": pool_doc(network={"deny_egress_by_default": True})})
    assert changed.status_code == 200, changed.json
    # Made under the old policy: no new session gets one.
    session = open_session(member, config["id"])
    assert first_exec(member, session)["sandbox_id"] not in before
    after = fill(config["id"], 2)
    assert not after & before
    assert not any(exists(engine, sandbox_id) for sandbox_id in before)
    assert all(r.policy["allow_internet_access"] is False
               for r in rows(config["id"], PoolState.ready))


def test_deleting_the_config_is_not_held_up_by_its_pool_and_leaves_nothing(world, engine):
    _, admin, config, member = world
    open_session(member, config["id"])
    waiting = fill(config["id"], 2)
    member_sessions = member.get("/api/v1/sessions").json["data"]
    for session in member_sessions:
        member.delete(f"/api/v1/sessions/{session['id']}")
    assert admin.delete(f"{CONFIGS}/{config['id']}").status_code == 200
    pools.tend()
    assert not any(exists(engine, sandbox_id) for sandbox_id in waiting)
    assert rows(config["id"]) == []


def test_a_pool_is_off_after_an_hour_without_new_sessions(world, engine):
    a, _, config, member = world
    open_session(member, config["id"])
    waiting = fill(config["id"], 2)
    (status,) = pools.status(a.tenant.id)
    assert (status.state, status.ready) == ("ready", 2)
    db.session.execute(update(WarmPool).values(last_session_at=utcnow() - timedelta(hours=2)))
    db.session.commit()
    pools.tend()
    assert rows(config["id"]) == []
    assert not any(exists(engine, sandbox_id) for sandbox_id in waiting)
    (status,) = pools.status(a.tenant.id)
    assert status.state == "off" and "no new session in the last hour" in status.note
    # The next session starts it again.
    open_session(member, config["id"])
    assert len(fill(config["id"], 2)) == 2


def test_waiting_sandboxes_hold_the_memory_budget_not_a_members_quota(world, app,
                                                                      monkeypatch):
    a, _, config, member = world
    open_session(member, config["id"])
    fill(config["id"], 2)
    usage = {q["name"]: q["used"] for q in quotas.usage(a.tenant, a.contributor.id)}
    assert usage["live_sandboxes_per_member"] == usage["live_sandboxes_per_workspace"] == 0
    per_sandbox = app.config["SANDBOX_DEFAULT_MEMORY_MB"]
    assert quotas.reserved_memory_mb(lambda doc: per_sandbox) == 2 * per_sandbox
    # A budget the two waiting sandboxes fill: a session still gets one (its memory is
    # held already), but the pool cannot refill, and the dashboard says why.
    monkeypatch.setitem(app.config, "SANDBOX_MEMORY_BUDGET_MB", 2 * per_sandbox)
    session = open_session(member, config["id"])
    assert first_exec(member, session)["exit_code"] == 0
    pools.tend()
    assert len(rows(config["id"], PoolState.ready)) == 1
    (status,) = pools.status(a.tenant.id)
    assert status.state == "held back" and "memory budget" in status.note
    assert status.in_use == 1


def test_a_claim_whose_session_ended_before_binding_is_removed(world, engine):
    _, _, config, member = world
    session_id = open_session(member, config["id"])
    fill(config["id"], 2)
    session = db.session.get(SandboxSession, session_id)
    row = pools.claim(db.session.get(SandboxConfig, config["id"]), session, None)
    assert row is not None and row.state == PoolState.claimed
    assert member.delete(f"/api/v1/sessions/{session_id}").status_code in (200, 204)
    pools.tend()
    assert not exists(engine, row.sandbox_id)
    assert [r.state for r in rows(config["id"])] == [PoolState.ready] * 2  # refilled


def test_the_egress_log_names_the_session_that_claimed_a_pool_sandbox(world):
    a, _, config, member = world
    session_id = open_session(member, config["id"])
    fill(config["id"], 2)
    first_exec(member, session_id)
    (row,) = rows(config["id"], PoolState.claimed)
    meta = {"sandlot_tenant_id": str(a.tenant.id), "sandlot_purpose": "pool",
            "sandlot_pool_id": row.id, "sandlot_sandbox_config_id": config["id"]}
    (line,) = egress_log._rows([{"meta": meta, "t": 1.0, "verdict": "allowed",
                                 "protocol": "tcp", "host": "example.org"}])
    assert line["session_id"] == session_id and line["user_id"] == a.contributor.id
    assert line["purpose"] == "session"


def test_the_pool_size_is_bounded_by_the_operator(world, app, monkeypatch):
    _, admin, _, _ = world
    monkeypatch.setitem(app.config, "SANDBOX_WARM_POOL_MAX", 3)
    response = admin.post(CONFIGS, json={"name": "big", "config": pool_doc(4)})
    assert response.status_code == 400
    (error,) = response.json["error"]["data"]["errors"]
    assert error["field"] == "docker.warm_pool_size" and "at most 3" in error["message"]
    monkeypatch.setitem(app.config, "SANDBOX_WARM_POOL_MAX", 0)
    response = admin.post(CONFIGS, json={"name": "big", "config": pool_doc(1)})
    assert response.status_code == 400 and "turned off" in str(response.json)


def test_the_keeper_thread_refills_by_itself(world, app):
    _, _, config, member = world
    open_session(member, config["id"])
    stop = threading.Event()
    keeper = threading.Thread(target=pools.keep, args=(app, stop, 0.2), daemon=True)
    keeper.start()
    try:
        waiting = wait_ready(config["id"], 2)
        session = open_session(member, config["id"])
        assert first_exec(member, session)["sandbox_id"] in waiting
        assert len(wait_ready(config["id"], 2) - waiting) == 1  # the one taken is replaced
    finally:
        stop.set()
        keeper.join(30)


def wait_ready(config_id: str, size: int, seconds: float = 30) -> set[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready = {r.sandbox_id for r in rows(config_id, PoolState.ready)}
        if len(ready) == size:
            return ready
        time.sleep(0.1)
    raise AssertionError(f"no {size} ready: {[(r.state, r.sandbox_id) for r in rows(config_id)]}")


def test_a_workspaces_pools_together_stay_within_its_quota(world, app, monkeypatch):
    a, admin, config, member = world
    monkeypatch.setitem(app.config, "QUOTA_WARM_SANDBOXES_PER_WORKSPACE", 3)
    other = admin.post(CONFIGS, json={"name": "other", "config": pool_doc()}).json["data"]
    open_session(member, config["id"])
    open_session(member, other["id"])
    for _ in range(4):
        pools.tend()
    waiting = rows(config["id"], PoolState.ready) + rows(other["id"], PoolState.ready)
    assert len(waiting) == 3
    held = [s for s in pools.status(a.tenant.id) if s.state == "held back"]
    assert len(held) == 1 and "quota of 3 warm pool sandboxes per workspace" in held[0].note
    usage = {q["name"]: q["used"] for q in quotas.usage(a.tenant, a.contributor.id)}
    assert usage["warm_sandboxes_per_workspace"] == 3


def test_a_claim_its_creator_never_bound_is_adopted_by_the_next_command(world):
    _, _, config, member = world
    session_id = open_session(member, config["id"])
    fill(config["id"], 2)
    row = pools.claim(db.session.get(SandboxConfig, config["id"]),
                      db.session.get(SandboxSession, session_id), None)  # then it stopped
    assert first_exec(member, session_id)["sandbox_id"] == row.sandbox_id
    assert len(rows(config["id"], PoolState.claimed)) == 1


def test_pool_sandboxes_no_row_names_are_swept(world, engine):
    _, _, config, member = world
    open_session(member, config["id"])
    waiting = fill(config["id"], 2)
    db.session.execute(delete(PoolSandbox))  # as if its workspace's rows were gone
    db.session.commit()
    # (only this config's: other test workers share the engine, with their own databases)
    assert pools.sweep_orphans(3600, config["id"]) == []  # younger than the grace: kept
    assert sorted(pools.sweep_orphans(0, config["id"])) == sorted(waiting)
    assert not any(exists(engine, sandbox_id) for sandbox_id in waiting)
