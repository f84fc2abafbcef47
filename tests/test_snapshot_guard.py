"""The session-end snapshot check (tests/snapshot_guard.py) can fail: it finds a snapshot
image of a config this process created, by label and by name, and ignores one of a config
another process created (xdist workers and other runs share the engine)."""

from __future__ import annotations

import uuid

import docker
import pytest

from tests import snapshot_guard
from tests.backends.conftest import BUSYBOX_IMAGE, DOCKER_HOST, require_docker
from tests.sweeps.routes import make_sandbox_config


def test_a_new_config_is_noted(two_tenants):
    a, _ = two_tenants
    assert make_sandbox_config(a.tenant) in snapshot_guard.CREATED_CONFIGS


@pytest.mark.parametrize("labelled", [True, False])
def test_a_leftover_snapshot_of_our_config_is_named_and_a_foreign_one_is_not(labelled):
    require_docker()
    ours, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    client = docker.DockerClient(base_url=DOCKER_HOST, timeout=60)
    tags = []
    try:
        for config_id in (ours, theirs):
            name = f"sandlot-sk-t1-{config_id.replace('-', '')}-g1-{uuid.uuid4().hex[:8]}"
            labels = {"sandlot.snapshot": name}
            if labelled:
                labels["sandlot_sandbox_config_id"] = config_id
            container = client.containers.create(BUSYBOX_IMAGE, "true", labels=labels)
            try:
                container.commit(repository="sandlot/snapshot", tag=name)
            finally:
                container.remove(force=True)
            tags.append(f"sandlot/snapshot:{name}")
        assert snapshot_guard.leftover_snapshots(client, {ours}) == [tags[0]]
    finally:
        for tag in tags:
            client.images.remove(tag)
        client.close()
