"""A private "internet" for the sandbox check's egress probes, in a network namespace.

Docker sandboxes cannot reach the host or any special-use range (decisions 5, issue 11
item 4: documentation ranges included), so the probe targets live at addresses of
192.175.48.0/24, which IANA's special-purpose registry marks globally reachable (AS112
direct delegation, anycast DNS sinks no workstation talks to), inside a namespace behind
one veth: OPEN and DENIED both answer HTTP on PORT, and NAMED HTTPS on 443. The
check sandboxes get their subnets from a pool of their own, and traffic from that pool is
routed by a policy-routing table that knows only the namespace and blackholes everything
else, so nothing leaves this machine even if enforcement were broken. The host's own
routing gains only NO_DNS's /32 (the host's veth address has no prefix route). The egress
resolver forwards to NO_DNS, in the namespace, which answers only ZONE's names (NXDOMAIN
for any other): no name is ever looked up outside.

Names differ from tests/backends/test_egress.py's world, so both can exist at once.
"""

from __future__ import annotations

import fcntl
import json
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
from tests.backends.test_egress import _self_signed

NETNS, VETH_HOST, VETH_NS = "sandlot-check-test", "sltc-host", "sltc-ns"
ROUTE_TABLE, RULE_PREF = "52116", "5216"
# The egress gateway's upstream connections (from the host) carry this mark: same table.
GATEWAY_MARK, MARK_RULE_PREF = "0x5216", "5217"
POOL = "10.216.0.0/16"
NET = "192.175.48"  # globally reachable per IANA
HOST_IP, OPEN, DENIED, NO_DNS = f"{NET}.1", f"{NET}.10", f"{NET}.11", f"{NET}.53"
NAMED, DOWN = f"{NET}.13", f"{NET}.12"  # HTTPS on 443 for OPEN_NAME; nothing listening
PORT = 8080
OPEN_URL, DENIED_URL = f"http://{OPEN}:{PORT}/", f"http://{DENIED}:{PORT}/"
# Names for allowed destinations: one answers HTTPS, the other's address nothing at all.
OPEN_NAME, DOWN_NAME = "Open.Check.example", "down.check.example"
# Their own addresses: an allowed name's answer lets the sandbox reach its address, which
# must not open a probe URL's address as a side effect.
ZONE = {OPEN_NAME.lower(): NAMED, DOWN_NAME: DOWN}
LOCK = Path("/run/lock/sandlot-check-tests.lock")

SERVER = r"""
import json, socket, ssl, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from dnslib import A, QTYPE, RCODE, RR, DNSRecord
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
port, zone, dns_ip, cert, key = int(sys.argv[1]), json.loads(sys.argv[2]), *sys.argv[3:6]
def resolve():  # ZONE's A records; NXDOMAIN for every other name
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((dns_ip, 53))
    while True:
        data, peer = udp.recvfrom(4096)
        query = DNSRecord.parse(data)
        name, reply = str(query.q.qname).lower().rstrip("."), query.reply()
        if name not in zone:
            reply.header.rcode = RCODE.NXDOMAIN
        elif query.q.qtype == QTYPE.A:
            reply.add_answer(RR(name, QTYPE.A, rdata=A(zone[name]), ttl=60))
        udp.sendto(reply.pack(), peer)
tls = ThreadingHTTPServer((zone["open.check.example"], 443), Echo)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
tls.socket = context.wrap_socket(tls.socket, server_side=True)
for serve in (resolve, tls.serve_forever):
    threading.Thread(target=serve, daemon=True).start()
server = ThreadingHTTPServer(("0.0.0.0", port), Echo)
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
        for address in (OPEN, DENIED, NAMED, DOWN, NO_DNS):
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
        cert, key = _self_signed(tmp)
        server = subprocess.Popen(
            ["ip", "netns", "exec", NETNS, sys.executable, "-c", SERVER, str(PORT),
             json.dumps(ZONE), NO_DNS, str(cert), str(key)],
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


@contextmanager
def probing(app, tmp: Path) -> Iterator[None]:
    """The world, with the app's probe URLs (the deployment's own) pointed into it."""
    saved = app.config["SANDBOX_EGRESS_PROBE_URLS"]
    with world(tmp):
        app.config["SANDBOX_EGRESS_PROBE_URLS"] = f"{DENIED_URL},{OPEN_URL}"
        try:
            yield
        finally:
            app.config["SANDBOX_EGRESS_PROBE_URLS"] = saved
