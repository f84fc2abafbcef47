"""A local package index for install tests: a tiny wheel built here, served by a plain
`python3 -m http.server` inside a network namespace this module creates.

The namespace hangs off the host by one veth (198.19.77.1 <-> 198.19.77.10, a benchmark
range: nothing on this machine or beyond uses it), so a sandbox whose policy denies by
default and allows only 198.19.77.10 reaches the index and nothing else. No traffic
leaves the machine. Sandboxes on Docker's bridges cannot reach each other (Docker's own
isolation), which is why the index is not a container.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

NETNS, VETH_HOST, VETH_NS = "sandlot-skill-index", "slsi-host", "slsi-ns"
# The namespace and links have fixed names: another test process on this machine waits here
# instead of tearing down an index that is in use.
INDEX_LOCK = Path("/run/lock/sandlot-package-index.lock")
HOST_IP, INDEX_IP, PORT = "198.19.77.1", "198.19.77.10", 8000


@dataclass(frozen=True)
class Index:
    ip: str
    url: str
    package: str
    value: str


def wheel(name: str, version: str, module: str, source: str) -> tuple[str, bytes]:
    """A valid pure-Python wheel (PEP 427), RECORD hashes and all."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{module}/__init__.py": source.encode(),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: "
                                      f"{version}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandlot-tests\n"
                                   b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}"
              for path, data in files.items()]
    files[f"{dist}.dist-info/RECORD"] = ("\n".join([*record, f"{dist}.dist-info/RECORD,,"])
                                         + "\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{dist}-py3-none-any.whl", out.getvalue()


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


def _teardown() -> None:
    sh("ip", "netns", "pids", NETNS, check=False)
    pids = sh("ip", "netns", "pids", NETNS, check=False).stdout.split()
    for pid in pids:
        sh("kill", "-9", pid, check=False)
    sh("ip", "link", "del", VETH_HOST, check=False)
    sh("ip", "netns", "del", NETNS, check=False)


@pytest.fixture(scope="module")
def package_index(tmp_path_factory) -> Iterator[Index]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("the package index namespace needs root and iproute2")
    root = tmp_path_factory.mktemp("index")
    value = "tiny-package-answer-42"
    name, data = wheel("sandlot-tiny", "1.0.0", "sandlot_tiny", f"VALUE = {value!r}\n")
    simple = root / "simple" / "sandlot-tiny"
    simple.mkdir(parents=True)
    (simple / name).write_bytes(data)
    (simple / "index.html").write_text(f'<a href="{name}">{name}</a>\n')
    INDEX_LOCK.parent.mkdir(parents=True, exist_ok=True)
    lock = INDEX_LOCK.open("a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    _teardown()  # a killed earlier run's leftovers
    sh("ip", "netns", "add", NETNS)
    try:
        sh("ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NS)
        sh("ip", "link", "set", VETH_NS, "netns", NETNS)
        sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", VETH_HOST)
        sh("ip", "link", "set", VETH_HOST, "up")
        ns = ("ip", "netns", "exec", NETNS)
        sh(*ns, "ip", "addr", "add", f"{INDEX_IP}/24", "dev", VETH_NS)
        sh(*ns, "ip", "link", "set", VETH_NS, "up")
        sh(*ns, "ip", "link", "set", "lo", "up")
        server = subprocess.Popen(
            [*ns, sys.executable, "-m", "http.server", str(PORT), "--bind", INDEX_IP,
             "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_up(server)
        yield Index(INDEX_IP, f"http://{INDEX_IP}:{PORT}/simple", "sandlot_tiny", value)
        server.kill()
        server.wait(timeout=10)
    finally:
        _teardown()
        lock.close()  # releases the lock


def _wait_up(server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        probe = sh("curl", "-sf", "-o", "/dev/null", f"http://{INDEX_IP}:{PORT}/simple/",
                   check=False)
        if probe.returncode == 0:
            return
        if server.poll() is not None:
            raise RuntimeError("the package index server exited")
        time.sleep(0.2)
    raise RuntimeError("the package index did not come up")



