"""Per-sandbox disk quota for Docker sandboxes (decisions 12).

The engine here stores containers on overlay2 over ext4, where `--storage-opt size=`
is refused (it needs xfs with project quotas), so a container's own writable layer
cannot be bounded. Instead a sandbox's root filesystem is read-only and everything it
may write lives on one filesystem of its own, mounted at /workspace, /tmp, the
sandbox user's home and the installed skills' /opt/weknora/tenant:

- on a local engine, with this process root: a sparse ext4 image of the limit's size,
  loop-mounted under SANDBOX_DISK_DIR (instance/disks). Writing past it fails with
  ENOSPC inside the sandbox; the host's disk only ever holds what the sandbox wrote,
  up to the limit. Released (unmounted, deleted) with the sandbox.
- otherwise (a remote engine, or not root): size-limited tmpfs volumes made by the
  engine. They hold just as well but live in the engine host's memory, and count
  against the sandbox's memory limit.

Each mount is an anonymous volume of the local driver (bind or tmpfs), so the engine
copies the image's content of the path in on first start (the home skeleton,
/workspace/input and output) and removes the volume with the container.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from app.backends.base import BackendError

log = logging.getLogger("sandlot.docker.disk")

ROOT = Path(__file__).resolve().parents[3]
LABEL = "sandlot.disk"  # on the container: the id of its loop disk
# ...and the SANDBOX_DISK_DIR it was made in: the process that removes the container (a
# worker ending the session) may have another one, and must still release this disk.
DIR_LABEL = "sandlot.disk_dir"
SANDBOX_UID = 1000
# Where a sandbox may write: (directory on the disk, mode, owner). Installed skills live
# under /opt/weknora/tenant (root's, as /opt is), so they can be added to a running
# sandbox and come with a skill snapshot (copied in at first start).
PLACES = {"/workspace": ("workspace", 0o755, SANDBOX_UID), "/tmp": ("tmp", 0o1777, 0),
          "/home/sandbox": ("home", 0o755, SANDBOX_UID),
          "/opt/weknora/tenant": ("tenant", 0o755, 0)}
TOOLS = ("mkfs.ext4", "mount", "umount")


def disk_dir() -> Path:
    path = Path(os.environ.get("SANDBOX_DISK_DIR") or ROOT / "instance" / "disks")
    return path if path.is_absolute() else ROOT / path


def loop_available(engine_host: str) -> bool:
    """Can this process make loop disks the engine can see (same host, root, tools)?"""
    return (engine_host.startswith("unix://") and hasattr(os, "geteuid")
            and os.geteuid() == 0 and all(shutil.which(tool) for tool in TOOLS))


@dataclass(frozen=True)
class Disk:
    """What a new container needs for its disk: mounts, and a label when it is a loop."""

    mounts: tuple[docker.types.Mount, ...]
    disk_id: str | None = None
    directory: str | None = None

    @property
    def labels(self) -> dict[str, str]:
        if not self.disk_id:
            return {}
        return {LABEL: self.disk_id, **({DIR_LABEL: self.directory} if self.directory else {})}


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode:
        # The tool's words name server paths: they go to the log, not to the user.
        log.warning("%s failed: %s", argv[0], (result.stderr or result.stdout).strip()[:500])
        raise BackendError(f"the sandbox's disk could not be set up ({argv[0]} failed); "
                           "see the server log")


def create(size_mb: int, engine_host: str) -> Disk:
    """A disk of `size_mb` for one new sandbox (loop-backed when possible)."""
    if not loop_available(engine_host):
        return Disk(tuple(_tmpfs_mount(target, size_mb, mode, uid)
                          for target, (_, mode, uid) in PLACES.items()))
    disk_id = secrets.token_hex(8)
    base = disk_dir()
    image, mount_dir = _paths(disk_id, base)
    image.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with open(image, "wb") as handle:  # sparse: costs only what gets written
            handle.truncate(size_mb << 20)
        os.chmod(image, 0o600)
        # No reserved blocks (the sandbox is the only user); lazy init keeps this ~50 ms.
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E",
             "lazy_itable_init=1,lazy_journal_init=1", str(image))
        mount_dir.mkdir(mode=0o700)
        _run("mount", "-o", "loop,nosuid,nodev,noatime", str(image), str(mount_dir))
        for name, mode, uid in PLACES.values():
            path = mount_dir / name
            path.mkdir()
            os.chown(path, uid, uid)
            path.chmod(mode)
        (mount_dir / "lost+found").rmdir()
    except BaseException:
        release(disk_id, str(base))
        raise
    return Disk(tuple(_bind_mount(target, mount_dir / name)
                      for target, (name, _, _) in PLACES.items()), disk_id, str(base))


def _bind_mount(target: str, source: Path) -> docker.types.Mount:
    driver = docker.types.DriverConfig("local", {"type": "none", "o": "bind",
                                                 "device": str(source)})
    return docker.types.Mount(target, None, type="volume", driver_config=driver)


def _tmpfs_mount(target: str, size_mb: int, mode: int, uid: int) -> docker.types.Mount:
    options = f"size={size_mb}m,mode={mode:o},uid={uid},gid={uid},nosuid,nodev"
    driver = docker.types.DriverConfig("local", {"type": "tmpfs", "device": "tmpfs",
                                                 "o": options})
    return docker.types.Mount(target, None, type="volume", driver_config=driver)


def _paths(disk_id: str, base: Path | None = None) -> tuple[Path, Path]:
    base = base or disk_dir()
    return base / f"{disk_id}.img", base / disk_id


def release(disk_id: str | None, directory: str | None = None) -> None:
    """Unmount and delete a loop disk (after its container is gone); gone is success.
    `directory`: the SANDBOX_DISK_DIR it was made in (its container's label), else this
    process's."""
    if not disk_id or not all(c in "0123456789abcdef" for c in disk_id):
        return
    base = Path(directory) if directory and Path(directory).is_absolute() else None
    image, mount_dir = _paths(disk_id, base)
    if os.path.ismount(mount_dir):
        deadline = time.monotonic() + 10
        while subprocess.run(["umount", str(mount_dir)], capture_output=True,
                             check=False).returncode:
            if time.monotonic() > deadline:  # still busy: detach now, freed when idle
                subprocess.run(["umount", "-l", str(mount_dir)], capture_output=True,
                               check=False)
                break
            time.sleep(0.1)
    try:
        mount_dir.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("sandbox disk %s: %s", disk_id, exc)
    image.unlink(missing_ok=True)


ORPHAN_GRACE_SEC = 600  # younger disks may belong to a create in progress
_swept: set[str] = set()  # engines whose leftovers this process has looked for


def sweep_once(api: docker.APIClient, engine_host: str) -> None:
    """Once per process and engine: release disks left by a crash (no container)."""
    if engine_host in _swept or not loop_available(engine_host):
        return
    _swept.add(engine_host)
    try:
        removed = sweep_orphans(api)
    except (OSError, docker.errors.DockerException) as exc:
        log.warning("sandbox disk sweep failed: %s", exc)
        return
    if removed:
        log.info("released sandbox disks of gone containers: %s", ", ".join(removed))


def sweep_orphans(api: docker.APIClient, grace_sec: float = ORPHAN_GRACE_SEC) -> list[str]:
    """Release loop disks older than `grace_sec` that no container carries; their ids."""
    removed = []
    now = time.time()
    for image in sorted(disk_dir().glob("*.img")):
        disk_id = image.stem
        try:
            age = now - image.stat().st_mtime
        except FileNotFoundError:
            continue
        if age < grace_sec or api.containers(all=True,
                                             filters={"label": f"{LABEL}={disk_id}"}):
            continue
        release(disk_id)
        removed.append(disk_id)
    return removed


def disk_of(container: dict) -> str | None:
    """The loop disk id of an inspected container, if it has one."""
    return ((container.get("Config") or {}).get("Labels") or {}).get(LABEL) or None


def directory_of(container: dict) -> str | None:
    """The SANDBOX_DISK_DIR an inspected container's loop disk was made in (None for a
    container made before the label: this process's directory is assumed)."""
    return ((container.get("Config") or {}).get("Labels") or {}).get(DIR_LABEL) or None
