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
