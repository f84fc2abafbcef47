"""Issue 22 item 1: one workspace cannot list, name or boot another's skill images.

Attack (worked on main before this): workspace B's admin asked `templates/query` for a
Docker config and got every tagged image on the engine, A's committed skill snapshots
among them, named after A's config id; B saved a config whose `docker.image` was A's
snapshot, and B's member booted it and read what A's installs left on disk.
Now: the images a tenant may name are the operator's (`SANDBOX_DOCKER_IMAGES`), the
app's snapshot images never among them; the catalog lists only those; a snapshot boots
only for the workspace and config whose install committed it; its name says neither.
"""

from __future__ import annotations

import uuid
from contextlib import closing

import docker
import pytest

from app.backends.base import BackendError, SandboxSpec
from app.backends.docker.backend import DockerBackend
from app.services.sandboxes import document, image
from tests.backends.conftest import BUSYBOX_IMAGE, DOCKER_HOST, require_docker

BASE = "/api/v1/sandbox-configs"


@pytest.fixture(scope="module")
def planted():
    """A's snapshot (labelled as an install commits one) and an image the operator never
    listed, both on the real engine."""
    require_docker()
    config_a = str(uuid.uuid4())
    name = f"sandlot-sk-{uuid.uuid4().hex}"
    with closing(docker.DockerClient(base_url=DOCKER_HOST, timeout=60)) as client:
        box = client.containers.create(BUSYBOX_IMAGE, "true", labels={
            "sandlot.snapshot": name, "sandlot_tenant_id": "1",
            "sandlot_sandbox_config_id": config_a, "sandlot_purpose": "install"})
        try:
            box.commit(repository="sandlot/snapshot", tag=name)
            box.commit(repository="sandlot-test/unlisted", tag="1")
        finally:
            box.remove(force=True)
        yield {"snapshot": f"sandlot/snapshot:{name}", "config_a": config_a,
               "unlisted": "sandlot-test/unlisted:1"}
        for ref in (f"sandlot/snapshot:{name}", "sandlot-test/unlisted:1"):
            client.images.remove(ref, force=True)


@pytest.fixture
def admin_b(two_tenants, bearer):
    _, b = two_tenants
    return bearer(b.admin, b.tenant)


def test_the_catalog_lists_only_the_operators_images(admin_b, planted):
    listed = admin_b.post(f"{BASE}/templates/query", json={"config": {
        "sandbox_type": "docker", "docker": {}}})
    assert listed.status_code == 200, listed.json
    ids = [t["id"] for t in listed.json["data"]["templates"]]
    assert "sandlot/sandbox:busybox" in ids
    assert planted["snapshot"] not in ids and planted["unlisted"] not in ids
    assert not [i for i in ids if i.startswith("sandlot/snapshot:")]


@pytest.mark.parametrize("which", ["snapshot", "unlisted"])
def test_a_tenant_cannot_name_a_snapshot_or_an_unlisted_image(admin_b, planted, which):
    created = admin_b.post(BASE, json={"name": "borrowed", "config": {
        "sandbox_type": "docker", "docker": {"image": planted[which]}}})
    assert created.status_code == 400, created.json
    [error] = created.json["error"]["data"]["errors"]
    assert error["field"] == "docker.image"
    assert planted["config_a"] not in created.json["error"]["message"]


def test_a_snapshot_boots_only_for_its_own_workspace_and_config(planted):
    backend = DockerBackend({"image": BUSYBOX_IMAGE, "host": DOCKER_HOST,
                             "network_mode": "none"})

    def spec(tenant: str, config: str) -> SandboxSpec:
        return SandboxSpec(template=planted["snapshot"], network_mode="none",
                           metadata={"sandlot_tenant_id": tenant,
                                     "sandlot_sandbox_config_id": config,
                                     "sandlot_session_id": str(uuid.uuid4()),
                                     "sandlot_purpose": "session"})

    try:
        for tenant, config in (("2", planted["config_a"]), ("1", str(uuid.uuid4()))):
            with pytest.raises(BackendError, match="belongs to another sandbox config"):
                backend.create(spec(tenant, config))
        own = backend.create(spec("1", planted["config_a"]))
        backend.delete(own.id)
    finally:
        backend.close()


def test_snapshot_names_reveal_no_ids():
    config_id = str(uuid.uuid4())
    name = image.planned_name()
    assert name.startswith("sandlot-sk-") and len(name) <= 128
    assert config_id.replace("-", "") not in name and "-t1-" not in name
    assert image.planned_name() != name


def test_the_operator_lists_repositories_and_namespaces(app, monkeypatch):
    def problems(ref: str) -> list[str]:
        try:
            document.validate({"sandbox_type": "docker", "docker": {"image": ref}})
        except Exception as exc:  # noqa: BLE001 - ValidationFailed; its fields are the point
            return [e["field"] for e in exc.errors]
        return []

    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_IMAGES",
                        ["sandlot/sandbox", "registry.example.com/team/"])
    for ok in ("sandlot/sandbox:base", "sandlot/sandbox@sha256:" + "a" * 64,
               "registry.example.com/team/py:3.12"):
        assert problems(ok) == [], ok
    for refused in ("registry.example.com/other/py:3.12", "sandlot/sandboxes:1",
                    "sandlot/other:1", "postgres:16"):
        assert problems(refused) == ["docker.image"], refused
    # A namespace covering the snapshots' repository still never lets a tenant name one.
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_IMAGES", ["sandlot/"])
    assert problems("sandlot/other:1") == []
    assert problems("sandlot/snapshot:sandlot-sk-abc") == ["docker.image"]


def test_the_pages_neither_offer_nor_accept_another_workspaces_snapshot(two_tenants,
                                                                        login_as, planted):
    """The same through the editor: "Load templates" and a saved form."""
    from app.models import SandboxConfig
    from tests.web._support import post_form, text
    from tests.web.test_sandboxes import slot

    _, b = two_tenants
    client = login_as(b.admin, b.tenant)
    offered = text(post_form(client, "/sandboxes/editor/templates",
                             {"sandbox_type": "docker", "docker.image": ""}, htmx=True))
    assert 'data-pick="sandlot/sandbox:busybox"' in offered
    assert "sandlot/snapshot" not in offered and planted["unlisted"] not in offered
    saved = post_form(client, "/sandboxes", {"name": "borrowed", "sandbox_type": "docker",
                                            "docker.image": planted["snapshot"],
                                            "docker.network_mode": "none"})
    assert saved.status_code == 400
    body = text(saved)
    assert "is a skill image this console builds" in slot(body, "err-docker-image")
    assert planted["config_a"] not in body
    assert SandboxConfig.query.filter_by(tenant_id=b.tenant.id).count() == 0
