"""A private "internet" for the sandbox check's egress probes, in a network namespace.

Docker sandboxes cannot reach the host or any special-use range (decisions 5, issue 11
item 4: documentation ranges included), so the probe targets live at addresses of
192.175.48.0/24, which IANA's special-purpose registry marks globally reachable (AS112
direct delegation, anycast DNS sinks no workstation talks to), inside a namespace behind
one veth: OPEN and DENIED both answer HTTP on PORT. The check sandboxes get their subnets
from a pool of their own, and traffic from that pool is routed by a policy-routing table
that knows only the namespace and blackholes everything else, so nothing leaves this
machine even if enforcement were broken. The host's own routing gains only NO_DNS's /32
(the host's veth address has no prefix route). The egress resolver forwards to NO_DNS,
in the namespace, where nothing answers DNS: no name is ever looked up outside.

Names differ from tests/backends/test_egress.py's world, so both can exist at once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from app.backends.docker.egress import dns, gateway, manager, nft
from tests.backends.conftest import in_ci, require_docker

NETNS, VETH_HOST, VETH_NS = "sandlot-check-test", "sltc-host", "sltc-ns"
ROUTE_TABLE, RULE_PREF = "52116", "5216"
# The egress gateway's upstream connections (from the host) carry this mark: same table.
GATEWAY_MARK, MARK_RULE_PREF = "0x5216", "5217"
POOL = "10.216.0.0/16"
NET = "192.175.48"  # globally reachable per IANA
HOST_IP, OPEN, DENIED, NO_DNS = f"{NET}.1", f"{NET}.10", f"{NET}.11", f"{NET}.53"
PORT = 8080
OPEN_URL, DENIED_URL = f"http://{OPEN}:{PORT}/", f"http://{DENIED}:{PORT}/"
LOCK = Path("/run/lock/sandlot-check-tests.lock")

SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Echo(BaseHTTPRequestHandler):
    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return body
    def do_HEAD(self):
        self.answer(b"")
    def do_GET(self):
        self.wfile.write(self.answer(self.connection.getsockname()[0].encode()))
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Echo)
print("ready", flush=True)
server.serve_forever()
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done


def require_world() -> None:
    """Skip (locally) or fail (CI) unless root, ip, nft and the engine are all here."""
    require_docker()
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    if shutil.which("ip") is None:
        problems.append("ip not installed")
    if nft.available():
        problems.append(nft.available())
    if problems:
        message = "the egress probe world needs " + "; ".join(problems)
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def _teardown() -> None:
    sh("ip", "rule", "del", "pref", RULE_PREF, check=False)
    sh("ip", "rule", "del", "pref", MARK_RULE_PREF, check=False)
    sh("ip", "route", "flush", "table", ROUTE_TABLE, check=False)
    sh("ip", "link", "del", VETH_HOST, check=False)
    sh("ip", "netns", "del", NETNS, check=False)


@contextmanager
def world(tmp: Path) -> Iterator[None]:
    """The namespace, its HTTP server, the routing that confines the pool, and the egress
    settings (own pool, own state dir, a DNS upstream that never answers)."""
    require_world()
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    lock = LOCK.open("a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    server = None
    try:
        _teardown()  # what a killed run left behind (fixed names)
        sh("ip", "netns", "add", NETNS)
        sh("ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NS)
        sh("ip", "link", "set", VETH_NS, "netns", NETNS)
        sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", VETH_HOST, "noprefixroute")
        sh("ip", "link", "set", VETH_HOST, "up")
        sh("ip", "route", "add", f"{NO_DNS}/32", "dev", VETH_HOST)  # the resolver's upstream
        for address in (OPEN, DENIED, NO_DNS):
            sh("ip", "-n", NETNS, "addr", "add", f"{address}/24", "dev", VETH_NS)
        sh("ip", "-n", NETNS, "link", "set", "lo", "up")
        sh("ip", "-n", NETNS, "link", "set", VETH_NS, "up")
        sh("ip", "-n", NETNS, "route", "add", "default", "via", HOST_IP)
        sh("ip", "route", "add", f"{NET}.0/24", "dev", VETH_HOST, "table", ROUTE_TABLE)
        sh("ip", "route", "add", "throw", POOL, "table", ROUTE_TABLE)
        sh("ip", "route", "add", "blackhole", "default", "table", ROUTE_TABLE)
        sh("ip", "rule", "add", "pref", RULE_PREF, "from", POOL, "lookup", ROUTE_TABLE)
        sh("ip", "rule", "add", "pref", MARK_RULE_PREF, "fwmark", GATEWAY_MARK, "lookup",
           ROUTE_TABLE)
        table = sh("ip", "route", "show", "table", ROUTE_TABLE).stdout
        assert "blackhole default" in table, table
        server = subprocess.Popen(
            ["ip", "netns", "exec", NETNS, sys.executable, "-c", SERVER, str(PORT)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        line = server.stdout.readline() if server.stdout else ""
        assert line.strip() == "ready", f"probe server did not start: {line}"
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SANDBOX_EGRESS_STATE_DIR", str(tmp))
            patch.setenv("SANDBOX_EGRESS_SUBNETS", POOL)
            patch.setenv("SANDBOX_DNS_UPSTREAM", NO_DNS)
            patch.setenv("SANDBOX_EGRESS_GATEWAY_MARK", GATEWAY_MARK)
            yield
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        _stop_daemon(dns.pid_path(tmp), dns.lock_path(tmp))
        _stop_daemon(gateway.pid_path(tmp), gateway.lock_path(tmp))
        _teardown()
        lock.close()


def _stop_daemon(pid_file: Path, lock: Path) -> None:
    if not pid_file.exists():
        return
    try:
        os.kill(int(pid_file.read_text()), 15)
    except (ProcessLookupError, ValueError):
        return
    deadline = time.monotonic() + 10
    while manager.holds_lock(lock) and time.monotonic() < deadline:
        time.sleep(0.1)
