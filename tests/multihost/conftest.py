"""Fixtures of the test deployments (tests/multihost)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing

import docker
import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import Job, JobStatus, SandboxConfig
from tests import snapshot_guard
from tests.backends.conftest import DOCKER_HOST
from tests.multihost.deploy import containers


@pytest.fixture
def docker_client() -> Iterator[docker.DockerClient]:
    with closing(docker.DockerClient(base_url=DOCKER_HOST, timeout=60)) as client:
        yield client


@pytest.fixture
def leaves_nothing(docker_client) -> Iterator[None]:
    """After the test, even a failed one: the deployment's jobs end, then every container
    and snapshot image of the test's configs goes (the processes that made them are not
    this one, so the root cleanup would not know them)."""
    yield
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        db.session.remove()
        if not db.session.scalars(select(Job).where(
                Job.status.in_([JobStatus.pending, JobStatus.running]))).first():
            break
        time.sleep(0.3)
    configs = set(db.session.scalars(select(SandboxConfig.id)))
    for config_id in configs:
        for box in containers(docker_client, sandlot_sandbox_config_id=config_id):
            box.remove(force=True)
    snapshot_guard.remove_snapshots(configs)
