"""Fixtures for skill installs on the real Docker engine: configs made through the API, a
waiter that polls the row with a deadline (no job outlives its test), and cleanup of every
sandbox and snapshot image a test left."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from contextlib import closing

import docker
import pytest
from sqlalchemy import select

from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.models import (
    InstalledSkill,
    Job,
    SandboxConfig,
    SandboxSession,
    SkillSnapshot,
)
from tests import snapshot_guard
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, require_docker
from tests.factories import config_doc
from tests.fakes import skill_registry
from tests.fakes.skill_archives import make_zip, skill_md
from tests.installs.package_index import package_index as package_index_fixture

CONFIGS = "/api/v1/sandbox-configs"
bundle_dir = skill_registry.bundle_dir  # fixture
package_index = package_index_fixture  # fixture
TERMINAL = ("ready", "failed")


@pytest.fixture
def engine() -> Iterator[DockerBackend]:
    require_docker()
    backend = DockerBackend({"image": BASE_IMAGE, "host": DOCKER_HOST, "http_timeout_sec": 60})
    yield backend
    backend.close()


@pytest.fixture
def fast(app, monkeypatch):
    """Short watcher and heartbeat periods, so stops and heartbeats show within a test."""
    monkeypatch.setitem(app.config, "SKILL_INSTALL_WATCH_SECONDS", 0.3)
    monkeypatch.setitem(app.config, "SKILL_INSTALL_HEARTBEAT_SECONDS", 1)


@pytest.fixture
def world(two_tenants, bearer, bundle_dir, engine, fast):
    a, b = two_tenants
    yield {"a": a, "b": b, "admin": bearer(a.admin, a.tenant),
           "member": bearer(a.contributor, a.tenant), "engine": engine}
    _wait_jobs()
    _cleanup(engine)


def _wait_jobs(deadline_sec: float = 120) -> None:
    """Belt and braces: a test that failed half-way still lets its jobs end first."""
    deadline = time.monotonic() + deadline_sec
    while time.monotonic() < deadline:
        db.session.remove()
        if not db.session.scalars(select(Job).where(Job.status.in_(["pending", "running"]))
                                  ).first():
            return
        time.sleep(0.3)


def _cleanup(engine: DockerBackend) -> None:
    db.session.remove()
    for session in db.session.scalars(select(SandboxSession)):
        if session.sandbox_id:
            engine.delete(session.sandbox_id)
    for sandbox in install_boxes(engine):
        engine.delete(sandbox.id)
    # Every snapshot image of this test's configs, whatever its row says: a row can be gone,
    # marked deleted, or still `building` without its id while the commit already made the
    # image (a stopped or crashed install). The session-end check (tests/snapshot_guard.py)
    # names any that still stays.
    configs = set(db.session.scalars(select(SandboxConfig.id)))
    refs = {row.snapshot_id for row in db.session.scalars(select(SkillSnapshot))
            if row.snapshot_id}
    with closing(docker.DockerClient(base_url=DOCKER_HOST, timeout=60)) as client:
        refs.update(snapshot_guard.leftover_snapshots(client, configs))
    for ref in sorted(refs):
        try:
            engine.delete_snapshot(ref)
        except Exception:  # noqa: BLE001 - best effort; the session-end check names it
            pass


def install_boxes(engine: DockerBackend) -> list:
    """This test's maintenance sandboxes: those of its own configs (other test runs may
    share the engine, and their tenant ids are the same small numbers)."""
    configs = set(db.session.scalars(select(SandboxConfig.id)))
    return [box for box in engine.list({"sandlot_purpose": "install"})
            if box.metadata.get("sandlot_sandbox_config_id") in configs]


def docker_config(api, name: str = "local", **doc) -> dict:
    body = config_doc("docker", {"image": BASE_IMAGE, "network_mode": "none",
                                 **doc.pop("docker", {})}, **doc)
    response = api.post(CONFIGS, json={"name": name, "config": body})
    assert response.status_code == 201, response.json
    return response.json["data"]


def skill_zip(name: str, files: dict[str, bytes], description: str = "A test skill",
              version: str = "1.0.0", frontmatter: str = "") -> bytes:
    md = skill_md(name, description=description, version=version).decode()
    if frontmatter:
        md = md.replace("\n---\n", f"\n{frontmatter}\n---\n", 1)
    return make_zip({"SKILL.md": md.encode(), **files})


def install_zip(api, config_id: str, data: bytes):
    return api.post(f"{CONFIGS}/{config_id}/skills",
                    data={"file": (io.BytesIO(data), "skill.zip")},
                    content_type="multipart/form-data")


def wait_for(skill_id: str, statuses=TERMINAL, deadline_sec: float = 60,
             gone: bool = False) -> InstalledSkill | None:
    """Poll the row until it reaches `statuses` (or is soft-deleted, with gone=True)."""
    deadline = time.monotonic() + deadline_sec
    while time.monotonic() < deadline:
        db.session.remove()
        row = db.session.get(InstalledSkill, skill_id)
        if gone and (row is None or row.deleted_at is not None):
            return row
        if not gone and row is not None and str(row.status) in statuses:
            job = db.session.get(Job, row.job_id) if row.job_id else None
            if job is None or job.is_terminal:  # the job is over too: nothing outlives us
                return row
        time.sleep(0.3)
    _dump(skill_id)
    raise AssertionError(f"skill {skill_id} did not reach {statuses} in {deadline_sec} s")


def _dump(skill_id: str) -> None:
    """What the run did, printed for a failing test's report."""
    from app.models import SkillInstallEvent

    row = db.session.get(InstalledSkill, skill_id)
    job = db.session.get(Job, row.job_id) if row is not None and row.job_id else None
    print("row:", row and (row.status, row.error, row.job_id, row.install_message_id))
    print("job:", job and (job.kind, job.status, job.error, job.stage))
    for event in db.session.scalars(select(SkillInstallEvent).where(
            SkillInstallEvent.skill_id == skill_id).order_by(SkillInstallEvent.id)):
        print("event:", event.run_id[:8], event.stage, event.kind, event.message[:200])


def open_session(api, config_id: str) -> str:
    response = api.post("/api/v1/sessions", json={"sandbox_config_id": config_id})
    assert response.status_code == 201, response.json
    return response.json["data"]["id"]


def run(api, session_id: str, command: str, **extra) -> dict:
    response = api.post(f"/api/v1/sessions/{session_id}/exec",
                        json={"command": command, **extra})
    assert response.status_code == 200, response.json
    return response.json["data"]


Waiter = Callable[..., InstalledSkill | None]
