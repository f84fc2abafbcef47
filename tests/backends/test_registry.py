"""Backend construction by sandbox type (no engine needed)."""

from __future__ import annotations

import pytest

from app.backends import registry
from app.backends.base import Backend, Unsupported
from app.backends.docker.backend import DockerBackend
from app.backends.docker.egress import manager as egress
from app.backends.e2b.cube import CubeBackend
from app.backends.e2b.e2b import E2BBackend


def test_docker_type_builds_a_docker_backend_without_contacting_it():
    backend = registry.make_backend("docker", {"image": "x", "host": "tcp://127.0.0.1:1",
                                               "allow_private_endpoints": False})

    assert isinstance(backend, DockerBackend)
    assert isinstance(backend, Backend)
    assert backend.provider == "docker"


@pytest.mark.parametrize(("kind", "cls"), [("e2b", E2BBackend), ("cube", CubeBackend)])
def test_e2b_and_cube_build_their_sdk_backends_without_contacting_them(kind, cls):
    backend = registry.make_backend(kind, {"api_key": "k", "template_id": "t",
                                           "api_url": "http://127.0.0.1:1"})

    assert isinstance(backend, cls)
    assert isinstance(backend, Backend)
    assert backend.provider == kind
    assert backend.capabilities == registry.capabilities_for(kind)


def test_unknown_type_is_unsupported():
    with pytest.raises(Unsupported):
        registry.make_backend("podman", {})
    with pytest.raises(Unsupported):
        registry.capabilities_for("podman")


def test_capabilities_are_declared_per_type():
    docker = registry.capabilities_for("docker")

    assert docker.pause_resume and docker.snapshots and docker.filesystem and docker.list
    assert docker.egress_rules == egress.host_supports()  # root + nftables on this host
    assert not docker.timeout_refresh
    assert registry.capabilities_for("e2b").egress_rules
    assert registry.capabilities_for("cube").timeout_refresh
    assert not registry.capabilities_for("e2b").volumes  # not implemented
    assert set(docker.as_dict()) == set(registry.capabilities_for("e2b").as_dict())


def test_a_remote_engine_cannot_have_its_egress_enforced_from_here():
    backend = registry.make_backend("docker", {"image": "x", "host": "tcp://127.0.0.1:1"})

    assert not backend.capabilities.egress_rules
    assert DockerBackend.capabilities.egress_rules == egress.host_supports()


FIRST_USE = """
import threading
from app.backends import registry
errors, start = [], threading.Barrier(6)
def use(kind):
    start.wait()
    try:
        registry.capabilities_for(kind)
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=use, args=(k,)) for k in ("e2b", "cube", "docker") * 2]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors[0] if errors else "ok")
"""


def test_first_uses_of_every_backend_at_once_do_not_deadlock_the_import():
    """The E2B and Cube modules import the SDK's circular package: two request threads
    that first needed them at once (the editor's template-status poll beside another
    request) got `_DeadlockError` from the import system, a 500 on the page. Fresh
    interpreters, since only a first import can race."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    # One at a time: about half the runs deadlocked before the fix (run side by side,
    # the processes slow each other down and the race is rarer).
    outputs = [subprocess.run([sys.executable, "-c", FIRST_USE], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120).stdout.strip()
               for _ in range(4)]
    assert outputs == ["ok"] * 4, outputs
