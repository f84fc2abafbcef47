"""What the test deployments of tests/multihost share: the processes' own directories,
stopping a process, the sandboxes of a session or config, and waiting for a condition."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import docker

from app.backends.docker import disk

ROOT = Path(__file__).resolve().parents[2]
FACTORY = "tests.multihost.host_app:make_app()"


def own_dirs(root: Path) -> dict[str, str]:
    """A process's own directories, as a host of its own keeps them."""
    made = {name: root / name for name in ("bundles", "egress", "disks", "tmp")}
    for path in made.values():
        path.mkdir(parents=True)
    return {"SANDLOT_TEST_BUNDLE_DIR": str(made["bundles"]),
            "SANDBOX_EGRESS_STATE_DIR": str(made["egress"]),
            "SANDBOX_DISK_DIR": str(made["disks"]), "TMPDIR": str(made["tmp"])}


def release_disks(directories: list[Path]) -> None:
    """Loop disks a failed run left mounted in the processes' directories (after the
    processes are gone): unmounted, so no mount outlives the module."""
    for directory in directories:
        for image in directory.glob("*.img"):
            disk.release(image.stem, str(directory))


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (RQ's warm shutdown: its job ends first; a node leaves the live set),
    then SIGKILL; none is left."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def containers(client: docker.DockerClient, **wanted) -> list:
    """The containers with these labels, inspected; one removed between the list and its
    inspect (a removal the caller is waiting for) is gone, not an error."""
    found = []
    for sparse in client.containers.list(all=True, sparse=True, filters={"label": [
            f"{key}={value}" for key, value in wanted.items()]}):
        try:
            found.append(client.containers.get(sparse.id))
        except docker.errors.NotFound:
            continue
    return found


def wait_for(seconds: float, what: str, check):
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return found
