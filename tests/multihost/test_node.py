"""Docker work runs on its engine's host (issue 28 item 2), in a test deployment: one
`flask node` owns the engine (SANDBOX_OWN_ENGINES=local) with directories of its own
(sandbox disks, egress state, temporary files); web host W (gunicorn) and a `flask
worker` own no engine, each with directories of their own, and reach it only through
the node (Redis). A session used on W has its sandbox's loop disk and egress state on
the node's host, never in W's directories (where a W that used the engine itself would
have put them); a long command started on W is cancelled through the node; a sandbox
paused by the idle pass of a process without the engine is resumed through W; ending the
session on W leaves nothing on the node's host; and with the node stopped, W answers
that no node serves the engine.

One deployment serves the whole module (starting it is most of its time). Tests run in
any order (pytest-randomly): the one that stops the node leaves it stopped, and the next
test that needs it starts a new one (`live_node`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from flask import Flask
from sqlalchemy import select, update

from app.backends.docker import disk
from app.backends.docker.egress import dns, gateway
from app.extensions import db
from app.jobs.queue import queue_name
from app.models import AuditEvent, JobStatus, SandboxConfig, SandboxSession
from app.models.types import utcnow
from app.services.sandboxes import incidents, nodes
from app.services.sandboxes.provider import backend_for
from app.services.sessions import binding
from tests import serving, snapshot_guard
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.factories import config_doc
from tests.jobs.helpers import delete_queue, wait_for_terminal, wait_for_workers
from tests.multihost.deploy import (
    FACTORY,
    ROOT,
    containers,
    own_dirs,
    release_disks,
    stop,
    wait_for,
)
from tests.streams.conftest import _hang_up_streams, read_stream, token  # noqa: F401

CONFIGS = "/api/v1/sandbox-configs"
SESSIONS = "/api/v1/sessions"
NO_NODE = "No Sandlot node serves the Docker engine 'local'"
# Denied egress by default, one name allowed: the node polices the sandbox (its own
# network, rules and a state file in the node's SANDBOX_EGRESS_STATE_DIR, its resolver).
# Nothing leaves the machine: the resolver's upstream is a closed local port
# (tests/conftest.py).
POLICED = {"deny_egress_by_default": True, "allow_out": ["pypi.org"]}
DISK_MB = 64


@dataclass
class Deployment:
    w: str  # web host W's base URL (owns no engine)
    dirs: dict[str, dict[str, Path]]  # each process's own directories, by kind
    idle: Flask  # an app owning no engine, for the idle pass (a worker's reaper runs it)
    start_node: Callable[[], subprocess.Popen]  # `flask node`, on the engine's host
    node: subprocess.Popen | None = None

    def node_up(self) -> subprocess.Popen:
        """The node, started again if a test stopped it, once it is live."""
        if self.node is None or self.node.poll() is not None:
            self.node = self.start_node()
        with self.idle.app_context():
            link = nodes.link()
        wait_for(30, "the node never went live",
                 lambda: link.live_nodes("local") or self.node.poll() is not None)
        assert self.node.poll() is None, "the node exited: see its log"
        return self.node

    def own(self, host: str, kind: str) -> Path:
        return self.dirs[host][kind]

    def files(self, host: str) -> list[Path]:
        """Every file in `host`'s own disk and egress directories."""
        return [path for kind in ("disks", "egress") for path in
                self.own(host, kind).rglob("*") if path.is_file()]

    def egress_states(self) -> list[Path]:
        return sorted(dns.sandboxes_dir(self.own("node", "egress")).glob("*.json"))

    def disks(self) -> list[Path]:
        return sorted(self.own("node", "disks").glob("*.img"))


@pytest.fixture(scope="module")
def deployment(app, app_factory, db_url, tmp_path_factory) -> Iterator[Deployment]:
    require_docker()
    redis_url = os.environ.get("TEST_REDIS_URL")
    if not redis_url:
        pytest.fail("TEST_REDIS_URL is not set (source /tmp/testenv.sh)")
    queue = f"sandlot-test-node-{uuid.uuid4().hex[:12]}"
    # The test's own view of the deployment: an app that owns no engine (as W and the
    # worker), on the module's queue.
    idle = app_factory(REDIS_URL=redis_url, JOB_QUEUE=queue, SANDBOX_OWN_ENGINES=[])
    shared = {"SANDLOT_TEST_JOB_QUEUE": queue_name(idle), "SANDLOT_TEST_BUNDLE_STORE": ""}
    root = tmp_path_factory.mktemp("node")
    own = {host: own_dirs(root / host) for host in ("node", "w", "worker")}
    engines = {"node": "local", "w": "", "worker": ""}
    logs = root / "logs"
    logs.mkdir()
    flask = str(Path(sys.executable).with_name("flask"))

    def start(host: str, command: str) -> subprocess.Popen:
        log = (logs / f"{host}.log").open("ab")
        stack.callback(log.close)
        process = subprocess.Popen(
            [flask, command], cwd=ROOT, stdout=log, stderr=log,
            env={**os.environ, "FLASK_APP": FACTORY, "PYTHONPATH": str(ROOT),
                 "SANDLOT_TEST_DATABASE_URL": db_url, "SANDLOT_TEST_REDIS_URL": redis_url,
                 "SANDLOT_TEST_OWN_ENGINES": engines[host], **shared, **own[host]})
        stack.callback(stop, process)
        return process

    with ExitStack() as stack:
        stack.callback(delete_queue, idle)
        stack.callback(release_disks, [Path(d["SANDBOX_DISK_DIR"]) for d in own.values()])
        stack.callback(_stop_egress_daemons, Path(own["node"]["SANDBOX_EGRESS_STATE_DIR"]))
        stack.callback(_leftovers_of, own["node"], logs, flask, db_url, redis_url, shared)
        node = start("node", "node")
        start("worker", "worker")
        w = stack.enter_context(serving.gunicorn(
            FACTORY, db_url, redis_url, {**shared, **own["w"], "SANDLOT_TEST_OWN_ENGINES": ""},
            logs / "w.log"))
        made = Deployment(w, {host: {kind: Path(dirs[variable]) for kind, variable in (
            ("disks", "SANDBOX_DISK_DIR"), ("egress", "SANDBOX_EGRESS_STATE_DIR"),
            ("tmp", "TMPDIR"))} for host, dirs in own.items()}, idle,
            lambda: start("node", "node"), node)
        made.node_up()
        wait_for_workers(idle, 1)
        yield made


def _stop_egress_daemons(state_dir: Path) -> None:
    """The node's resolver and gateway run on after it (as on a real host): stopped."""
    for pid_file in (dns.pid_path(state_dir), gateway.pid_path(state_dir)):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass


def _leftovers_of(node_env: dict[str, str], logs: Path, flask: str, db_url: str,
                  redis_url: str, shared: dict[str, str]) -> None:
    """After a failed run: what the node's host still holds for containers that are gone
    (egress networks, rules, state files, loop disks) is released there, by its own
    sweep (`flask jobs reap` with the node's directories)."""
    state = dns.sandboxes_dir(Path(node_env["SANDBOX_EGRESS_STATE_DIR"]))
    if not list(state.glob("*.json")) and not list(
            Path(node_env["SANDBOX_DISK_DIR"]).glob("*.img")):
        return
    with (logs / "reap.log").open("ab") as log:
        subprocess.run(
            [flask, "jobs", "reap"], cwd=ROOT, stdout=log, stderr=log, timeout=120,
            env={**os.environ, "FLASK_APP": FACTORY, "PYTHONPATH": str(ROOT),
                 "SANDLOT_TEST_DATABASE_URL": db_url, "SANDLOT_TEST_REDIS_URL": redis_url,
                 "SANDLOT_TEST_OWN_ENGINES": "local", **shared, **node_env}, check=False)


@dataclass
class Opened:
    config_id: str
    session_id: str
    sandbox_id: str

    @property
    def path(self) -> str:
        return f"{SESSIONS}/{self.session_id}"


def _open(w: httpx.Client, admin: dict, member: dict, network: dict | None = None) -> Opened:
    """A policed Docker config with a disk limit, made on W, and a member's session on it
    with its sandbox started (so each exec below answers within the synchronous wait)."""
    made = w.post(CONFIGS, headers=admin, json={"name": f"node-{uuid.uuid4().hex[:6]}",
                                                "config": config_doc(
        "docker", {"image": BASE_IMAGE, "disk_limit_mb": DISK_MB}, network=network or POLICED)})
    assert made.status_code == 201, made.text
    config_id = made.json()["data"]["id"]
    snapshot_guard.CREATED_CONFIGS.add(config_id)
    opened = w.post(SESSIONS, headers=member, json={"sandbox_config_id": config_id})
    assert opened.status_code == 201, opened.text
    session_id = opened.json()["data"]["id"]
    started = w.post(f"{SESSIONS}/{session_id}/sandbox", headers=member)
    assert started.status_code == 200, started.text
    data = started.json()["data"]
    assert data["binding_state"] == "bound" and data["sandbox_id"], data
    return Opened(config_id, session_id, data["sandbox_id"])


def _exec(w: httpx.Client, member: dict, opened: Opened, command: str) -> dict:
    """A short command's result. On a busy machine it may outlive the 2 s synchronous
    wait (202): then its run is followed to its end (its view has no `reused`)."""
    answer = w.post(f"{opened.path}/exec", headers=member, json={"command": command})
    assert answer.status_code in (200, 202), answer.text
    data = answer.json()["data"]
    if answer.status_code == 202:
        run_path = f"{opened.path}/runs/{data['id']}"
        data = wait_for(30, f"the run of {command!r} did not end", lambda: (
            run := w.get(run_path, headers=member).json()["data"])["status"] != "running"
            and run)
        data = {**data, "sandbox_id": opened.sandbox_id, "reused": None}
    assert data["exit_code"] == 0 and data["sandbox_id"] == opened.sandbox_id, data
    return data


def _box(docker_client, opened: Opened):
    boxes = containers(docker_client, sandlot_session_id=opened.session_id)
    assert len(boxes) == 1 and opened.sandbox_id in (boxes[0].id, boxes[0].name), boxes
    return boxes[0]


def _end(w: httpx.Client, member: dict, opened: Opened, docker_client,
         deployment: Deployment) -> str:
    """End the session on W; the worker's removal (through the node) leaves no container,
    no loop disk and no egress state on the node's host. The removal job's id."""
    ended = w.delete(opened.path, headers=member)
    assert ended.status_code == 200, ended.text
    job_id = ended.json()["data"]["job_id"]
    assert job_id, ended.text
    wait_for(20, "the session's sandbox is still there",
             lambda: not containers(docker_client, sandlot_session_id=opened.session_id))
    wait_for(10, "the node's host still holds the sandbox's disk or egress state",
             lambda: not deployment.disks() and not deployment.egress_states())
    assert not list(deployment.own("node", "disks").iterdir())
    return job_id


def _untouched(deployment: Deployment) -> None:
    """W and the worker never touched the engine themselves: their own disk and egress
    directories hold nothing (a process using the engine would have made the loop disk
    or the egress state in its own)."""
    for host in ("w", "worker"):
        assert not deployment.files(host), (host, deployment.files(host))


@pytest.fixture
def live_node(deployment) -> subprocess.Popen:
    return deployment.node_up()


@pytest.fixture
def cleans_through_node(deployment, docker_client, leaves_nothing) -> Iterator[None]:
    """After a failed test, before leaves_nothing's forced removal and the root cleanup
    (this process's, whose egress state directory is not the node's): the sandboxes
    still there are removed through the node, which releases their loop disk and egress
    state on its host."""
    yield
    db.session.remove()
    left = [(config, box) for config in db.session.scalars(select(SandboxConfig))
            for box in containers(docker_client, sandlot_sandbox_config_id=config.id)]
    if not left:
        return
    deployment.node_up()
    with deployment.idle.app_context():
        for config, box in left:
            backend_for(config.config).delete(box.id)


@pytest.fixture
def clients(app, deployment, two_tenants) -> Iterator[tuple[httpx.Client, dict, dict]]:
    a, _ = two_tenants
    with httpx.Client(base_url=deployment.w, timeout=60) as w:
        yield w, token(app, a.admin, a.tenant), token(app, a.contributor, a.tenant)


def test_a_session_on_w_runs_on_the_node_host(deployment, live_node, clients, docker_client,
                                              cleans_through_node):
    w, admin, member = clients
    opened = _open(w, admin, member)
    first = _exec(w, member, opened, "echo hi")
    assert first["stdout"] == "hi\n", first
    again = _exec(w, member, opened, "df -m /workspace | tail -1")
    assert again["reused"] in (True, None), again  # None: followed after a 202
    assert int(again["stdout"].split()[1]) <= DISK_MB, again  # the sandbox's own disk
    # The loop disk and the egress state are the node's, made in its directories...
    box = _box(docker_client, opened)
    assert box.labels.get(disk.DIR_LABEL) == str(deployment.own("node", "disks")), box.labels
    assert [p.stem for p in deployment.disks()] == [box.labels[disk.LABEL]]
    assert len(deployment.egress_states()) == 1, deployment.egress_states()
    _untouched(deployment)  # ...never W's
    _end(w, member, opened, docker_client, deployment)
    _untouched(deployment)


def test_a_long_run_on_w_is_cancelled_on_the_node_host(deployment, live_node, clients,
                                                       docker_client, cleans_through_node):
    w, admin, member = clients
    opened = _open(w, admin, member)
    started = w.post(f"{opened.path}/exec", headers=member,
                     json={"command": "echo started; sleep 30"})
    assert started.status_code == 202, started.text
    run_path = f"{opened.path}/runs/{started.json()['data']['id']}"
    followed = read_stream(deployment.w, f"{run_path}/events", member, limit=30)
    assert followed.status == 200, followed.body
    # The command's live output came back from the node while it runs.
    assert followed.wait_frames(1), "no frame of the run on W"
    assert followed.frames[0] == {"stream": "stdout", "text": "started\n"}, followed.frames
    box = _box(docker_client, opened)
    assert "sleep 30" in box.exec_run(["ps", "-eo", "args"]).output.decode()
    cancelled = w.post(f"{run_path}/cancel", headers=member)
    assert cancelled.status_code == 202, cancelled.text
    assert followed.ended.wait(15), "the stream of the cancelled run did not end"
    assert followed.frames[-1]["done"] is True, followed.frames[-3:]
    assert followed.frames[-1]["status"] == "cancelled", followed.frames[-3:]
    assert w.get(run_path, headers=member).json()["data"]["status"] == "cancelled"
    left = box.exec_run(["ps", "-eo", "args"]).output.decode().splitlines()
    assert "sleep 30" not in left, left
    _untouched(deployment)
    _end(w, member, opened, docker_client, deployment)


def test_a_sandbox_paused_when_idle_is_resumed_through_w(deployment, live_node, clients,
                                                         docker_client, cleans_through_node):
    w, admin, member = clients
    opened = _open(w, admin, member)
    _exec(w, member, opened, "echo kept > /workspace/kept.txt")
    # Idle past its TTL: the idle pass of a process owning no engine (a worker's reaper)
    # pauses it through the node.
    db.session.execute(update(SandboxSession).where(SandboxSession.id == opened.session_id)
                       .values(last_used_at=utcnow() - timedelta(days=1)))
    db.session.commit()
    with deployment.idle.app_context():
        assert binding.pause_idle() == 1
    box = _box(docker_client, opened)
    box.reload()
    assert box.status == "paused", box.status
    # W starts the session's sandbox again: the paused one, resumed through the node.
    resumed = w.post(f"{opened.path}/sandbox", headers=member)
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["data"]["sandbox_id"] == opened.sandbox_id, resumed.text
    box.reload()
    assert box.status == "running", box.status
    again = _exec(w, member, opened, "cat /workspace/kept.txt")
    assert again["reused"] in (True, None) and again["stdout"] == "kept\n", again
    _box(docker_client, opened)  # the same sandbox, the only one
    assert len(deployment.egress_states()) == 1, deployment.egress_states()
    _untouched(deployment)
    _end(w, member, opened, docker_client, deployment)


def test_ending_the_session_on_w_leaves_nothing_on_the_node_host(
        deployment, live_node, clients, docker_client, cleans_through_node):
    w, admin, member = clients
    opened = _open(w, admin, member)
    _exec(w, member, opened, "head -c 1048576 /dev/zero > /workspace/blob")
    assert deployment.disks() and deployment.egress_states()
    job_id = _end(w, member, opened, docker_client, deployment)  # the assertions are there
    # The removal was the worker's job (it owns no engine either), and it succeeded.
    assert wait_for_terminal(job_id).status == JobStatus.succeeded
    _untouched(deployment)


def test_without_a_live_node_w_refuses_docker_work(deployment, live_node, clients,
                                                   cleans_through_node):
    """It stops the node (a later test starts another)."""
    w, admin, member = clients
    made = w.post(CONFIGS, headers=admin, json={"name": "before", "config": config_doc(
        "docker", {"image": BASE_IMAGE, "network_mode": "none"})})
    assert made.status_code == 201, made.text
    config_id = made.json()["data"]["id"]
    snapshot_guard.CREATED_CONFIGS.add(config_id)
    opened = w.post(SESSIONS, headers=member, json={"sandbox_config_id": config_id})
    assert opened.status_code == 201, opened.text
    session_path = f"{SESSIONS}/{opened.json()['data']['id']}"

    stop(live_node)  # SIGTERM: the node leaves the live set on its way out
    assert live_node.returncode == 0, live_node.returncode
    with deployment.idle.app_context():
        assert not nodes.live_nodes("local")

    # The member reads that the engine has no node; the config's admins read why.
    refused = w.post(f"{session_path}/exec", headers=member, json={"command": "echo hi"})
    assert refused.status_code == 503, refused.text
    assert "Docker engine has no node running" in refused.json()["error"]["message"], \
        refused.text
    notes = db.session.scalars(select(AuditEvent).where(
        AuditEvent.action == incidents.ACTION, AuditEvent.object_id == config_id)).all()
    assert len(notes) == 1 and NO_NODE in notes[0].data["detail"], [n.data for n in notes]
    _untouched(deployment)
    # A new Docker config on that engine is refused at save, on docker.engine.
    saved = w.post(CONFIGS, headers=admin, json={"name": "after", "config": config_doc(
        "docker", {"image": BASE_IMAGE, "network_mode": "none"})})
    assert saved.status_code in (400, 422), saved.text
    errors = saved.json()["error"]["data"]["errors"]
    assert [e["field"] for e in errors] == ["docker.engine"], errors
    assert NO_NODE.lower() in errors[0]["message"].lower(), errors
