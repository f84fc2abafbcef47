"""A deployment run on this machine the way two machines run it (issue 28, "tests that
prove it"): web processes for host A and host B (real gunicorn, each with directories of
its own: skill bundles, egress state, sandbox disks, temporary files), one `flask worker`
(RQ, directories of its own too), and what hosts share: the database, Redis, skill
bundles in S3 (moto's server) and the Docker engine. Nothing one process wrote to its own
disk is read by another: a skill uploaded on A installs on the worker from S3 and is
followed to its end from B; a session opened on B runs the skill on B and then on A in
the same sandbox; a long command started on A is followed and cancelled from B; the
session ended on B leaves no container once the worker removed it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.jobs.queue import queue_name
from app.services.sandboxes.provider import labels
from tests import serving, snapshot_guard
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.factories import config_doc
from tests.fakes.skill_archives import make_zip, skill_md
from tests.jobs.helpers import delete_queue, wait_for_workers
from tests.multihost.deploy import (
    FACTORY,
    ROOT,
    containers,
    own_dirs,
    release_disks,
    stop,
    wait_for,
)
from tests.storage.conftest import moto_endpoint  # noqa: F401 (fixture)
from tests.streams.conftest import _hang_up_streams, read_stream, token  # noqa: F401

CONFIGS = "/api/v1/sandbox-configs"
SESSIONS = "/api/v1/sessions"
SKILL = "two-hosts"
RUN_SH = b'#!/bin/sh\necho "hello $1 from the skill in $(pwd)"\n'


@dataclass
class Deployment:
    a: str  # host A's base URL
    b: str  # host B's base URL
    bucket: str
    s3: object  # a boto3 client of the moto server
    dirs: dict[str, Path]  # each process's own bundle directory
    disks: dict[str, Path]  # each process's own SANDBOX_DISK_DIR
    worker: subprocess.Popen


@pytest.fixture(scope="module")
def deployment(app, app_factory, db_url, moto_endpoint,  # noqa: F811 (fixture)
               tmp_path_factory) -> Iterator[Deployment]:
    require_docker()
    redis_url = os.environ.get("TEST_REDIS_URL")
    if not redis_url:
        pytest.fail("TEST_REDIS_URL is not set (source /tmp/testenv.sh)")
    import boto3

    bucket = f"two-hosts-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    queue = f"sandlot-test-two-hosts-{uuid.uuid4().hex[:12]}"
    rq_app = app_factory(REDIS_URL=redis_url, JOB_QUEUE=queue)
    shared = {"SANDLOT_TEST_JOB_QUEUE": queue_name(rq_app),
              "SANDLOT_TEST_BUNDLE_STORE": f"s3://{bucket}/bundles?endpoint={moto_endpoint}"}
    root = tmp_path_factory.mktemp("two-hosts")
    own = {host: own_dirs(root / host) for host in ("a", "b", "worker")}
    logs = root / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        stack.callback(delete_queue, rq_app)
        stack.callback(release_disks, [Path(d["SANDBOX_DISK_DIR"]) for d in own.values()])
        worker_log = (logs / "worker.log").open("ab")
        stack.callback(worker_log.close)
        worker = subprocess.Popen(
            [str(Path(sys.executable).with_name("flask")), "worker"], cwd=ROOT,
            env={**os.environ, "FLASK_APP": FACTORY, "PYTHONPATH": str(ROOT),
                 "SANDLOT_TEST_DATABASE_URL": db_url, "SANDLOT_TEST_REDIS_URL": redis_url,
                 **shared, **own["worker"]},
            stdout=worker_log, stderr=worker_log)
        stack.callback(stop, worker)
        a = stack.enter_context(serving.gunicorn(FACTORY, db_url, redis_url,
                                                 {**shared, **own["a"]}, logs / "a.log"))
        b = stack.enter_context(serving.gunicorn(FACTORY, db_url, redis_url,
                                                 {**shared, **own["b"]}, logs / "b.log"))
        wait_for_workers(rq_app, 1)
        yield Deployment(a, b, bucket, s3,
                         {h: Path(d["SANDLOT_TEST_BUNDLE_DIR"]) for h, d in own.items()},
                         {h: Path(d["SANDBOX_DISK_DIR"]) for h, d in own.items()},
                         worker)


def test_a_skill_session_and_run_span_two_hosts_and_a_worker(
        app, deployment, two_tenants, docker_client, leaves_nothing):
    a, _ = two_tenants
    admin, member = token(app, a.admin, a.tenant), token(app, a.contributor, a.tenant)
    host_a = httpx.Client(base_url=deployment.a, timeout=60)
    host_b = httpx.Client(base_url=deployment.b, timeout=60)
    with host_a, host_b:
        # 1. The admin makes a config and uploads a skill on host A.
        made = host_a.post(CONFIGS, headers=admin, json={"name": "two-hosts", "config": config_doc(
            "docker", {"image": BASE_IMAGE, "network_mode": "none"})})
        assert made.status_code == 201, made.text
        config_id = made.json()["data"]["id"]
        snapshot_guard.CREATED_CONFIGS.add(config_id)  # the session-end check looks too
        bundle = make_zip({"SKILL.md": skill_md(SKILL), "run.sh": RUN_SH})
        uploaded = host_a.post(f"{CONFIGS}/{config_id}/skills", headers=admin,
                               files={"file": ("skill.zip", io.BytesIO(bundle), "application/zip")})
        assert uploaded.status_code == 202, uploaded.text
        skill_id = uploaded.json()["data"]["skill_id"]
        skill_path = f"{CONFIGS}/{config_id}/skills/{skill_id}"

        # 2. The worker installs it from S3 (no host's directory holds the bundle), and
        # host B's event stream follows the install to its end.
        stream = read_stream(deployment.b, f"{skill_path}/install-events", admin, limit=90)
        assert stream.status == 200, stream.body
        stored = deployment.s3.list_objects_v2(Bucket=deployment.bucket, Prefix="bundles/")
        assert stored.get("KeyCount", 0) >= 1, stored
        assert stream.ended.wait(90), "the install stream on B did not end"
        assert stream.frames and stream.frames[-1]["done"] is True, stream.frames[-3:]
        assert stream.frames[-1]["status"] == "ready", stream.frames[-3:]
        view = host_b.get(skill_path, headers=admin).json()["data"]
        assert view["status"] == "ready" and view["installed_snapshot_id"], view
        for host, directory in deployment.dirs.items():  # each kept its own disk to itself
            assert not [p for p in directory.rglob("*") if p.is_file()], (host, directory)

        # 3. A member's session on B: the skill runs on B, then on A in the same sandbox.
        opened = host_b.post(SESSIONS, headers=member,
                             json={"sandbox_config_id": config_id, "title": "two hosts"})
        assert opened.status_code == 201, opened.text
        session_id = opened.json()["data"]["id"]
        session_path = f"{SESSIONS}/{session_id}"
        # Its sandbox made first (on B), so that every exec below answers within the 2 s
        # synchronous wait: the first exec would otherwise include the creation.
        sandbox = host_b.post(f"{session_path}/sandbox", headers=member)
        assert sandbox.status_code == 200, sandbox.text
        sandbox_id = sandbox.json()["data"]["sandbox_id"]
        assert sandbox_id and sandbox.json()["data"]["binding_state"] == "bound", sandbox.text
        on_b = host_b.post(f"{session_path}/exec", headers=member,
                           json={"command": "sh run.sh world", "skill": SKILL})
        assert on_b.status_code == 200, on_b.text
        on_b = on_b.json()["data"]
        assert on_b["exit_code"] == 0 and on_b["sandbox_id"] == sandbox_id, on_b
        assert on_b["stdout"].strip().startswith("hello world from the skill in /"), on_b
        assert SKILL in on_b["stdout"]  # run in the skill's own folder
        on_a = host_a.post(f"{session_path}/exec", headers=member,
                           json={"command": "sh run.sh again", "skill": SKILL})
        assert on_a.status_code == 200, on_a.text
        on_a = on_a.json()["data"]
        assert on_a["exit_code"] == 0 and "hello again" in on_a["stdout"], on_a
        assert on_a["reused"] is True and on_a["sandbox_id"] == sandbox_id, on_a
        boxes = containers(docker_client, sandlot_session_id=session_id)
        assert len(boxes) == 1 and sandbox_id in (boxes[0].id, boxes[0].name), boxes

        # 4. A long command started on A, followed and cancelled from B.
        started = host_a.post(f"{session_path}/exec", headers=member,
                              json={"command": "echo started; sleep 60"})
        assert started.status_code == 202, started.text
        run_id = started.json()["data"]["id"]
        run_path = f"{session_path}/runs/{run_id}"
        followed = read_stream(deployment.b, f"{run_path}/events", member, limit=30)
        assert followed.status == 200, followed.body
        # A's output reaches B's stream (the row A writes, B woken through Redis).
        assert followed.wait_frames(1), "no frame of the run on B"
        assert followed.frames[0] == {"stream": "stdout", "text": "started\n"}, followed.frames
        asked = time.monotonic()
        cancelled = host_b.post(f"{run_path}/cancel", headers=member)
        assert cancelled.status_code in (200, 202), cancelled.text
        assert followed.ended.wait(15), "B's stream of the cancelled run did not end"
        assert followed.frames[-1]["done"] is True, followed.frames[-3:]
        assert followed.frames[-1]["status"] == "cancelled", followed.frames[-3:]
        ended_after = time.monotonic() - asked
        assert ended_after < 10, ended_after
        run = host_a.get(run_path, headers=member).json()["data"]
        assert run["status"] == "cancelled", run
        left = host_a.post(f"{session_path}/exec", headers=member,
                           json={"command": "ps -eo args | grep -c '^sleep 60' || true"})
        assert left.status_code == 200 and left.json()["data"]["stdout"].strip() == "0", left.text

        # 5. The session ended on B: the worker removes its sandbox.
        ended = host_b.delete(session_path, headers=member)
        assert ended.status_code == 200, ended.text
        wait_for(60, "the session's sandbox is still there",
                 lambda: not containers(docker_client, sandlot_session_id=session_id))
        assert not containers(docker_client, **labels(a.tenant.id, config_id=config_id))
        # The sandbox's loop disk, made by B under B's own SANDBOX_DISK_DIR, is released
        # by the worker that removed the container (it was left mounted before).
        for host, directory in deployment.disks.items():
            assert not list(directory.iterdir()), (host, list(directory.iterdir()))
    assert deployment.worker.poll() is None, "the worker died"
