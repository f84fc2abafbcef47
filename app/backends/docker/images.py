"""Snapshots and templates of the Docker backend: images on the engine.

A mixin of DockerBackend (it uses the backend's `api`, `_errors` and `_inspect`).
"""

from __future__ import annotations

import json
import re

import docker

from app.backends.base import BackendError, TemplateBuild, TemplateInfo, Unsupported
from app.backends.docker import exec_agent

SNAPSHOT_REPO = "sandlot/snapshot"
SNAPSHOT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
SNAPSHOT_LABEL = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class DockerImages:
    """`docker commit` snapshots and the engine's tagged images as templates."""

    snapshot_repo = SNAPSHOT_REPO

    @staticmethod
    def _check_snapshot_owner(image: dict, metadata: dict[str, str]) -> None:
        """A skill snapshot boots only for the workspace and config whose install run
        committed it: the run's container labels, which `docker commit` keeps, must name
        the sandbox-to-be's (issue 22: another workspace's image is never booted)."""
        labels = (image.get("Config") or {}).get("Labels") or {}
        tags = image.get("RepoTags") or ()
        if "sandlot.snapshot" not in labels and not any(
                t.startswith(f"{SNAPSHOT_REPO}:") for t in tags):
            return
        for key in ("sandlot_tenant_id", "sandlot_sandbox_config_id"):
            if not labels.get(key) or labels.get(key) != metadata.get(key):
                raise BackendError("this skill image belongs to another sandbox config; "
                                   "it cannot be booted here")

    def added_bytes(self, sandbox_id: str) -> int:
        """What the sandbox wrote to its root filesystem: the size a `docker commit` of it
        adds to the image (E2B and Cube have no such figure; callers check for it)."""
        container_id = self._inspect(sandbox_id)["Id"]
        with self._errors("measure sandbox"):
            found = self.api.containers(all=True, size=True, filters={"id": container_id})
        return int((found[0].get("SizeRw") if found else 0) or 0)

    def changed_paths(self, sandbox_id: str) -> list[tuple[str, str]]:
        """What the sandbox changed in its image's filesystem, as `docker diff` lists it:
        (path, "changed" | "added" | "deleted"); a changed directory is listed too. The
        exec agent's mount points are the engine's doing, not the sandbox's: a bind mount
        is written to the host, never to the image, so they are left out."""
        container_id = self._inspect(sandbox_id)["Id"]
        with self._errors("diff sandbox"):
            changes = self.api.diff(container_id) or []
        kinds = {0: "changed", 1: "added", 2: "deleted"}
        return [(c["Path"], kinds.get(c.get("Kind"), "changed")) for c in changes
                if c["Path"] not in exec_agent.MOUNT_POINTS]

    def snapshot_id_for(self, name: str) -> str:
        """The image reference a snapshot named `name` gets (to find an abandoned build)."""
        return f"{SNAPSHOT_REPO}:{name}"

    def create_snapshot(self, sandbox_id: str, name: str,
                        labels: dict[str, str] | None = None) -> str:
        """`docker commit` to sandlot/snapshot:<name>, labelled `sandlot.snapshot=<name>`
        plus `labels`; returns that image reference."""
        changes = self.label_changes(name, labels)
        container_id = self._inspect(sandbox_id)["Id"]
        with self._errors("create snapshot"):
            self.api.commit(container_id, repository=SNAPSHOT_REPO, tag=name, pause=True,
                            changes=changes)
        return self.snapshot_id_for(name)

    @staticmethod
    def label_changes(name: str, labels: dict[str, str] | None) -> list[str]:
        """The commit's LABEL instructions: `sandlot.snapshot=<name>` and `labels`."""
        if not SNAPSHOT_NAME.match(name):
            raise BackendError("snapshot name must be 1-128 of [A-Za-z0-9_.-], "
                               "not starting with . or -")
        return [f"LABEL {key}={json.dumps(value)}"
                for key, value in {"sandlot.snapshot": name, **(labels or {})}.items()
                if SNAPSHOT_LABEL.match(key)]

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot image; not found is success, in use is an error."""
        if not snapshot_id.startswith(f"{SNAPSHOT_REPO}:"):
            raise BackendError(f"{snapshot_id} is not a sandlot snapshot")
        try:
            with self._errors("delete snapshot"):
                try:
                    self.api.remove_image(snapshot_id)
                except docker.errors.NotFound:
                    return
        except BackendError as exc:
            if "conflict" in exc.reason.lower() or "being used" in exc.reason:
                raise BackendError(f"snapshot {snapshot_id} is in use by a sandbox") from None
            raise

    def list_templates(self) -> list[TemplateInfo]:
        """Tagged local images (no registry is consulted)."""
        with self._errors("list images"):
            images = self.api.images()
        tags = {tag for image in images for tag in image.get("RepoTags") or ()
                if "<none>" not in tag}
        return [TemplateInfo(id=tag, name=tag) for tag in sorted(tags)]

    # Docker images are built on the host (scripts/sandbox-image.sh), never by the console.
    def build_template(self, name: str, image: str,
                       tags: tuple[str, ...] = ("default",)) -> TemplateBuild:
        raise Unsupported("Docker has no template builds; build the image on the engine")

    def build_status(self, template_id: str, build_id: str) -> TemplateBuild:
        raise Unsupported("Docker has no template builds")

    def delete_template(self, template_id: str) -> None:
        raise Unsupported("Docker has no template builds")

