"""A client of the local Docker engine for tests that look at sandboxes from outside the
app (what a session or a run left running); registered for every test by the root
conftest's `pytest_plugins`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.backends.docker.backend import DockerBackend
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, require_docker


@pytest.fixture
def engine() -> Iterator[DockerBackend]:
    require_docker()
    backend = DockerBackend({"image": BASE_IMAGE, "host": DOCKER_HOST, "http_timeout_sec": 30})
    yield backend
    backend.close()
