"""Backend fixtures: a contract harness per provider (Docker on the real engine, E2B and
Cube through the real `e2b` SDK against tests/fakes/e2b_server.py) and cleanup of
everything a test run creates.

The Docker tests use the real local engine and the real `sandlot/sandbox:base` image
(scripts/services.sh start, scripts/sandbox-image.sh); so do the E2B/Cube fakes, whose
sandboxes are containers of that image. Without them the tests skip with
the reason, except under CI=true, where they fail: CI must prepare the engine itself.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.backends import registry
from app.backends.base import Backend, BackendError, SandboxInfo, SandboxSpec
from app.backends.docker import disk
from app.backends.docker.backend import DockerBackend

DOCKER_HOST = os.environ.get("SANDLOT_TEST_DOCKER_HOST", "unix:///var/run/docker.sock")
BASE_IMAGE = "sandlot/sandbox:base"
BUSYBOX_IMAGE = "sandlot/sandbox:busybox"
RUN_ID = uuid.uuid4().hex[:10]
RUN_LABEL = "sandlot_test_run"  # on every sandbox a test creates
FOREIGN_LABEL = "foreign_test_run"  # on containers that are deliberately not ours
SNAPSHOT_PREFIX = f"t{RUN_ID}-"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def docker_settings(**overrides: Any) -> dict[str, Any]:
    return {"image": BASE_IMAGE, "host": DOCKER_HOST, "http_timeout_sec": 30, **overrides}


_engine_problem: list[str | None] = []


def require_docker() -> None:
    """Skip (locally) or fail (CI) unless the engine answers and has the sandbox images."""
    if not _engine_problem:
        backend = DockerBackend(docker_settings(http_timeout_sec=10))
        try:
            backend.health()
            backend._require_image(BUSYBOX_IMAGE)
            _engine_problem.append(None)
        except BackendError as exc:
            _engine_problem.append(exc.reason)
        finally:
            backend.close()
    problem = _engine_problem[0]
    if problem:
        message = (f"Docker engine or sandbox image not usable: {problem}. Run "
                   "`bash scripts/services.sh install && bash scripts/services.sh start && "
                   "bash scripts/sandbox-image.sh`.")
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class Harness:
    """One provider under the contract: how to make specs for it and clean up after."""

    name: str
    backend: Backend
    template: str
    created: list[str] = field(default_factory=list)
    teardown: Callable[[], None] | None = None  # stops a fake provider

    def metadata(self, **extra: str) -> dict[str, str]:
        return {
            "sandlot_tenant_id": f"tenant-{RUN_ID}",
            "sandlot_session_id": uuid.uuid4().hex,
            "sandlot_binding_version": "1",
            "sandlot_provider": self.name,
            "sandlot_sandbox_config_id": f"config-{RUN_ID}",
            "sandlot_purpose": "session",
            RUN_LABEL: RUN_ID,
            **extra,
        }

    def spec(self, metadata: dict[str, str] | None = None, **fields: Any) -> SandboxSpec:
        fields.setdefault("template", self.template)
        return SandboxSpec(metadata=self.metadata(**(metadata or {})), **fields)

    def create(self, metadata: dict[str, str] | None = None, **fields: Any) -> SandboxInfo:
        info = self.backend.create(self.spec(metadata, **fields))
        self.created.append(info.id)
        return info

    def cleanup(self) -> None:
        for sandbox_id in self.created:
            self.backend.delete(sandbox_id)
        self.created.clear()


def _docker_harness() -> Harness:
    require_docker()
    return Harness("docker", DockerBackend(docker_settings()), BASE_IMAGE)


def _fake_harness(flavor: str) -> Harness:
    """E2B or Cube: the real SDK against a local fake of the provider's API."""
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer(flavor, image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}{flavor}").start()
    backend = registry.make_backend(flavor, server.settings())
    return Harness(flavor, backend, server.template_id, teardown=server.stop)


HARNESSES = {"docker": _docker_harness, "e2b": lambda: _fake_harness("e2b"),
             "cube": lambda: _fake_harness("cube")}


@pytest.fixture(scope="module", params=sorted(HARNESSES))
def harness(request, exec_path: str) -> Iterator[Harness]:
    """The provider under the contract, shared by a module; its sandboxes go at the end.
    (E2B and Cube have no exec agent: their second exec path is skipped.)"""
    if exec_path == "engine" and request.param != "docker":
        pytest.skip("no exec agent outside Docker")
    h = HARNESSES[request.param]()
    try:
        yield h
        h.cleanup()
    finally:
        h.backend.close()
        if h.teardown:
            h.teardown()


@pytest.fixture(scope="module")
def shared(harness: Harness) -> SandboxInfo:
    """One running sandbox for tests that only read or write their own files."""
    return harness.create(env={"CREATE_VAR": "from-create"})


@pytest.fixture
def docker_backend(exec_path: str) -> Iterator[DockerBackend]:
    require_docker()
    backend = DockerBackend(docker_settings())
    yield backend
    backend.close()


@pytest.fixture
def docker_harness(docker_backend: DockerBackend) -> Iterator[Harness]:
    h = Harness("docker", docker_backend, BASE_IMAGE)
    yield h
    h.cleanup()


@pytest.fixture(scope="session", autouse=True)
def _remove_test_containers() -> Iterator[None]:
    """Safety net: whatever a test created and did not delete goes at the end of the run."""
    yield
    try:
        import docker

        api = docker.APIClient(base_url=DOCKER_HOST, version="auto", timeout=30)
    except Exception:  # noqa: BLE001 - no engine, nothing to clean
        return
    with api:
        for label in (RUN_LABEL, FOREIGN_LABEL):
            for row in api.containers(all=True, filters={"label": f"{label}={RUN_ID}"}):
                api.remove_container(row["Id"], force=True, v=True)
                disk.release((row.get("Labels") or {}).get(disk.LABEL))
        for row in api.containers(all=True, filters={"label": "sandlot_fake_e2b"}):
            if (row.get("Labels") or {}).get("sandlot_fake_e2b", "").startswith(RUN_ID):
                api.remove_container(row["Id"], force=True, v=True)
        for image in api.images(name="sandlot/snapshot"):
            for tag in image.get("RepoTags") or ():
                if tag.startswith(f"sandlot/snapshot:{SNAPSHOT_PREFIX}"):
                    api.remove_image(tag, force=True)
        # Their egress networks, nft rules and state files (when this host enforces).
        from app.backends.docker.egress.manager import EgressManager

        egress = EgressManager(api, DOCKER_HOST)
        if egress.unavailable_reason() is None:
            egress.cleanup_orphans(grace_sec=0, metadata={RUN_LABEL: RUN_ID})
