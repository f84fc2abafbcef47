"""Session-end check that no skill snapshot image outlives the tests that made it.

A snapshot image (`sandlot/snapshot:sandlot-sk-...`, ~175 MB) belongs to one sandbox config;
every config this process creates is noted here (a mapper event, so configs made by the
services, the factories and the live server's threads all count), and at the end of the
session any snapshot image of those configs still on the engine fails the run, by name.
Other test processes share the engine under xdist, so only this process's configs are
looked at. The images named are then removed, so a failing run does not fill the disk.
Each test's cleanup already removes the images of the configs it made
(`release_test_snapshots`), so what the session-end check still finds was made after
its test ended.
Registered for every test by the root conftest's `pytest_plugins`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import docker
import pytest
from sqlalchemy import event

from app.models import SandboxConfig
from tests.backends.conftest import DOCKER_HOST

SNAPSHOT_LABEL = "sandlot.snapshot"
CONFIG_LABEL = "sandlot_sandbox_config_id"
CREATED_CONFIGS: set[str] = set()
# configs made since the last per-test release (`release_test_snapshots`)
UNRELEASED: set[str] = set()
# config id -> the test that created it, so a leak names the test to fix, not just the image
CREATED_BY: dict[str, str] = {}


@event.listens_for(SandboxConfig, "after_insert")
def _note_config(_mapper, _connection, target: SandboxConfig) -> None:
    CREATED_CONFIGS.add(str(target.id))
    UNRELEASED.add(str(target.id))
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    CREATED_BY[str(target.id)] = test or "a session fixture"


def snapshot_owner(tags: list[str], labels: dict[str, str]) -> str | None:
    """The config an image's snapshot belongs to: its label, else the id in its name
    (`sandlot-sk-t<tenant>-<config id without dashes>-g<gen>-<ledger>`)."""
    if labels.get(CONFIG_LABEL):
        return labels[CONFIG_LABEL]
    for tag in tags:
        parts = tag.rpartition(":")[2].split("-")
        if len(parts) >= 4 and parts[:2] == ["sandlot", "sk"]:
            return parts[3]
    return None


def leftover_snapshots(client: docker.DockerClient, config_ids: set[str]) -> list[str]:
    """Tags of the snapshot images on the engine that belong to `config_ids`."""
    return sorted(leftovers_by_config(client, config_ids))


def leftovers_by_config(client: docker.DockerClient, config_ids: set[str]) -> dict[str, str]:
    """Tag -> owning config id, for the snapshot images of `config_ids` on the engine."""
    wanted = {c: c for c in config_ids} | {c.replace("-", "").lower(): c for c in config_ids}
    found = {}
    # The low-level list carries tags and labels itself: the high-level one inspects each
    # image after listing, which fails when another xdist worker removes one in between.
    for image in client.api.images(filters={"label": SNAPSHOT_LABEL}):
        tags = [tag for tag in image.get("RepoTags") or () if tag != "<none>:<none>"]
        owner = snapshot_owner(tags, image.get("Labels") or {})
        if owner in wanted:
            for tag in tags or [image["Id"]]:
                found[tag] = wanted[owner]
    return found


def remove_snapshots(config_ids: set[str]) -> dict[str, str]:
    """Remove every snapshot image of `config_ids` from the engine; return what was found
    (tag -> config). A removal that fails (another fixture removed it meanwhile) is left
    for the session-end check to name if the image truly stays."""
    try:
        client = docker.DockerClient(base_url=DOCKER_HOST, timeout=30)
        client.ping()
    except docker.errors.DockerException:
        return {}  # no engine, so no image either
    try:
        found = leftovers_by_config(client, config_ids)
        for tag in found:
            try:
                client.images.remove(tag, noprune=False)
            except docker.errors.DockerException:
                pass
    finally:
        client.close()
    return found


def release_test_snapshots() -> None:
    """Remove the snapshot images of the configs made since the last call: the root
    conftest's cleanup calls this after each test has settled its jobs, so an install a
    test started (in any test module, through any route) never leaves its image behind."""
    if UNRELEASED:
        configs = set(UNRELEASED)
        UNRELEASED.clear()
        remove_snapshots(configs)


@pytest.fixture(scope="session", autouse=True)
def _no_snapshot_outlives_the_run() -> Iterator[None]:
    yield
    if not CREATED_CONFIGS:
        return
    leaked = remove_snapshots(set(CREATED_CONFIGS))
    if leaked:
        named = "; ".join(f"{tag} (config made by {CREATED_BY.get(config, '?')})"
                          for tag, config in sorted(leaked.items()))
        pytest.fail("snapshot images left on the engine by this run's sandbox configs "
                    f"(a fixture did not release them): {named}", pytrace=False)
