"""Skill snapshots built from what an install may change, not from its whole container.

An install's maintenance sandbox has a read-only image and a bounded disk of its own
(disk.py) under /opt/weknora/tenant, /tmp, /workspace and the home directory, so what
its commands write stays on that disk and out of `docker commit`. The snapshot is built
instead from a short-lived carrier container of the sandbox's image: the skill's old
directory is removed there, the paths the install may change (its directory, the
manifest) are copied in from the sandbox, owned by root and with no group or other
write, no setuid and no special files, and the carrier is committed (decisions 14).

A root step (install-root.sh, where the operator allows it) writes the image itself: its
sandbox's root filesystem is committed first and the carrier starts from that.

A mixin of DockerBackend (it uses the backend's `api`, `_errors` and `_inspect`).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import docker

from app.backends.base import METADATA_PREFIX, BackendError
from app.backends.docker import containers
from app.backends.docker.files import SANDBOX_USER, USER_IDS

CARRIER_LABEL = "sandlot.carrier"
CARRIER_WAIT_SEC = 60
CARRIER_STALE_SEC = 600  # an older carrier belongs to a build that crashed
_KEPT_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE,
               tarfile.LNKTYPE)


@dataclass
class Packed:
    """The carried paths as one tar on this host: `size` counts their files' bytes (what
    the install adds to the image); past `limit` nothing more was kept (`over`)."""

    path: str
    size: int
    over: bool

    def discard(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class _Chunks(io.RawIOBase):
    """A readable file over the engine's archive stream (an iterator of byte chunks)."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks, self.left = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.left:
            try:
                self.left = next(self.chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self.left))
        buffer[:size], self.left = self.left[:size], self.left[size:]
        return size


def _owned_by_root(member: tarfile.TarInfo, prefix: str) -> tarfile.TarInfo:
    """The entry as the image gets it: under `prefix`, root's, at most 0755, and
    nothing else carried over (no xattrs, so no file capabilities)."""
    entry = tarfile.TarInfo(posixpath.join(prefix, member.name))
    entry.type, entry.size, entry.mtime = member.type, member.size, member.mtime
    entry.mode = member.mode & 0o755
    entry.uid = entry.gid = 0
    entry.uname = entry.gname = "root"
    if member.issym():
        entry.linkname = member.linkname
    elif member.islnk():
        entry.linkname = posixpath.join(prefix, member.linkname)
    return entry


def _carrier_argv(image: dict, replace: list[str]) -> tuple[dict, list[str]]:
    """How the carrier runs its `rm`, and the commit instructions that give the snapshot
    its base's entrypoint, command and user back (a commit keeps the carrier's own). An
    image without an entrypoint keeps none: the `rm` is its command, since a commit can
    set an entrypoint but not clear one. Sessions always name their command."""
    config = image.get("Config") or {}
    argv = ["sh", "-c", 'rm -rf -- "$@"', "sh", *replace]
    entrypoint, command = config.get("Entrypoint"), config.get("Cmd")
    run = {"entrypoint": argv, "command": None} if entrypoint else {"command": argv}
    changes = [f"ENTRYPOINT {json.dumps(entrypoint)}"] if entrypoint else []
    if command:
        changes.append(f"CMD {json.dumps(command)}")
    if config.get("User"):
        changes.append(f"USER {config['User']}")
    return run, changes


class DockerCarry:
    """`pack` and `create_snapshot_carrying` of DockerBackend."""

    carries_installs = True  # installs run contained, and snapshots carry their paths
    install_uid = USER_IDS[SANDBOX_USER]  # who owns the skill's directory meanwhile

    def pack(self, sandbox_id: str, paths: Iterable[str], limit_bytes: int) -> Packed:
        """The `paths` of the sandbox (a missing one is skipped) as one tar, re-owned."""
        container_id = self._inspect(sandbox_id)["Id"]
        handle, name = tempfile.mkstemp(prefix="sandlot-carry-", suffix=".tar")
        packed = Packed(name, 0, False)
        try:
            with os.fdopen(handle, "wb") as out_file, \
                    tarfile.open(fileobj=out_file, mode="w", format=tarfile.PAX_FORMAT) as out:
                for path in paths:
                    self._pack_one(container_id, path, out, packed, limit_bytes)
        except BaseException:
            packed.discard()
            raise
        return packed

    def _pack_one(self, container_id: str, path: str, out: tarfile.TarFile,
                  packed: Packed, limit_bytes: int) -> None:
        prefix = posixpath.dirname(path.rstrip("/")).lstrip("/")
        with self._errors("read install result"):
            try:
                stream, _ = self.api.get_archive(container_id, path)
            except docker.errors.NotFound:
                return
            with tarfile.open(fileobj=io.BufferedReader(_Chunks(iter(stream))),
                              mode="r|") as source:
                for member in source:
                    if member.type not in _KEPT_TYPES:
                        continue  # fifos and devices (an install cannot make the latter)
                    entry = _owned_by_root(member, prefix)
                    if member.isreg():
                        packed.size += member.size
                        packed.over = packed.over or packed.size > limit_bytes
                    if packed.over:
                        continue  # only counted from here: the caller refuses it
                    out.addfile(entry, source.extractfile(member) if member.isreg() else None)

    def create_snapshot_carrying(self, sandbox_id: str, name: str, packed: Packed,
                                 replace: list[str], with_root: bool = False) -> str:
        """Snapshot `name`: the sandbox's image (with its root filesystem's changes when
        `with_root`), `replace` removed, `packed` added; labelled as a commit of the
        sandbox would be (its sandlot_* labels, which the owner check reads)."""
        data = self._inspect(sandbox_id)
        changes = self.label_changes(name, {
            key: value for key, value in (data["Config"].get("Labels") or {}).items()
            if key.startswith(METADATA_PREFIX) and value})
        base, made_base = data["Image"], False
        if with_root:
            with self._errors("create snapshot"):
                base = self.api.commit(data["Id"], pause=True)["Id"]
            made_base = True
        carrier = None
        try:
            with self._errors("create snapshot"):
                self._sweep_carriers()
                inspected = self.api.inspect_image(base)
                run, restore = _carrier_argv(inspected, replace)
                carrier = self.api.create_container(
                    base, **run, user="root", network_disabled=True,
                    labels={**containers.labels_for({}, inspected), CARRIER_LABEL: name},
                    host_config=self.api.create_host_config(
                        network_mode="none", cap_drop=["ALL"],
                        security_opt=["no-new-privileges"]))["Id"]
                self.api.start(carrier)
                status = self.api.wait(carrier, timeout=CARRIER_WAIT_SEC)
                if status.get("StatusCode"):
                    raise BackendError("create snapshot failed: the skill's previous files "
                                       "could not be removed from the image")
                with open(packed.path, "rb") as archive:
                    self.api.put_archive(carrier, "/", archive)
                self.api.commit(carrier, repository=self.snapshot_repo, tag=name,
                                changes=changes + restore)
        except BaseException:
            if made_base:
                self._drop_image(base)
            raise
        finally:
            if carrier is not None:
                self._drop_container(carrier)
        return self.snapshot_id_for(name)

    def _sweep_carriers(self) -> None:
        """Carriers a crashed build left (a carrier lives a second or two otherwise)."""
        now = time.time()
        for row in self.api.containers(all=True, filters={"label": CARRIER_LABEL}):
            if now - float(row.get("Created") or now) > CARRIER_STALE_SEC:
                self._drop_container(row["Id"])

    def _drop_container(self, container_id: str) -> None:
        try:
            self.api.remove_container(container_id, force=True)
        except docker.errors.APIError:
            pass  # gone already; _sweep_carriers retries what is left

    def _drop_image(self, image_id: str) -> None:
        try:
            self.api.remove_image(image_id)
        except docker.errors.APIError:
            pass
