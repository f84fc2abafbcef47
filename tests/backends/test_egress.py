"""Docker egress enforcement (decisions 5) on the real engine, real nftables, real DNS.

A private "internet" lives in a network namespace this module creates: one veth to the
host, HTTP servers answering with the address they were reached on and a test DNS server
(zone below) that logs every query it sees. Its "public" addresses are in 192.31.196.0/24,
which IANA's special-purpose registry marks globally reachable (AS112, anycast DNS sinks
no workstation talks to), so no built-in deny covers them; the special-use, private and
fake metadata targets (192.0.2.1, 198.18.0.1/.5, 192.168.213.10, 169.254.169.254) live
there too, as single addresses. The resolver's upstream is that server, and the sandboxes'
subnets come from a test pool, so no real DNS is used.

Nothing may leave this machine even if enforcement were broken: traffic from the test
pool is routed by a policy-routing table that knows only the namespace and blackholes
everything else. The host's own routing gains only the DNS server's /32 (the host's veth
address is added without its prefix route), so the host keeps reaching everything else,
including special-use ranges it really uses (here the default gateway is 192.0.2.1).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest

from app.backends.base import BackendError, ResolvedNetworkPolicy, SandboxInfo
from app.backends.docker.backend import DockerBackend
from app.backends.docker.egress import dns, dns_answer, gateway, log_files, manager, nft
from tests.backends.conftest import (
    BASE_IMAGE,
    RUN_ID,
    RUN_LABEL,
    Harness,
    docker_settings,
    in_ci,
    require_docker,
)

# Fixed names: one world per machine at a time (WORLD_LOCK), and a killed run's leftovers
# are found and removed by the next one.
NETNS, VETH_HOST, VETH_NS = "sandlot-egress-test", "sltw-host", "sltw-ns"
ROUTE_TABLE = "52113"
RULE_PREF = "5213"
# The egress gateway's own upstream connections (from the host) carry this mark and are
# routed by the same confined table.
GATEWAY_MARK, MARK_RULE_PREF = "0x5213", "5214"
POOL = "10.214.0.0/16"  # sandbox subnets in this module
NET = "192.31.196"  # globally reachable per IANA: the test world's "internet"
HOST_IP = f"{NET}.1"  # the host's end of the veth
A, B = f"{NET}.10", f"{NET}.11"
GOOD, BAD, SVC_SUB, SVC_APEX, SHORT, CNAMED = (f"{NET}.{n}" for n in range(20, 26))
DNS_IP = f"{NET}.53"
PRIVATE_IP = "192.168.213.10"
METADATA_IP = "169.254.169.254"
# Special-use targets (issue 11 item 4): documentation and benchmarking addresses.
TEST_NET_1, BENCHMARK, BENCHMARK_DNS = "192.0.2.1", "198.18.0.1", "198.18.0.5"
SINGLE = (PRIVATE_IP, METADATA_IP, TEST_NET_1, BENCHMARK, BENCHMARK_DNS)
NS_ADDRESSES = [f"{ip}/24" for ip in (A, B, GOOD, BAD, SVC_SUB, SVC_APEX, SHORT, CNAMED,
                                      DNS_IP)] + [f"{ip}/32" for ip in SINGLE]
ROUTES = [f"{NET}.0/24"] + [f"{ip}/32" for ip in SINGLE]
HTTP_PORT = 8080
WORLD_LOCK = Path("/run/lock/sandlot-egress-tests.lock")
ZONE = {
    "good.test.example": ["A", GOOD, 60],
    "bad.test.example": ["A", BAD, 60],
    "later.test.example": ["A", BAD, 60],  # allowed only once a sandbox's policy changes
    "a.svc.example": ["A", SVC_SUB, 60],
    "svc.example": ["A", SVC_APEX, 60],
    "short.test.example": ["A", SHORT, 1],
    "rebind.test.example": ["A", PRIVATE_IP, 60],
    "benchmark.test.example": ["A", BENCHMARK_DNS, 60],
    "cname.test.example": ["CNAME", "target.elsewhere.example", 60],
    "target.elsewhere.example": ["A", CNAMED, 60],
}

# Runs inside the namespace: HTTP on every address, the test zone on DNS_IP:53.
WORLD = r"""
import json, socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from dnslib import A, CNAME, QTYPE, RCODE, RR, DNSRecord

zone, dns_ip, log_path, port = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
cert, key = sys.argv[5], sys.argv[6]

class Echo(BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.connection.getsockname()[0].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

def answer(data):
    query = DNSRecord.parse(data)
    name = str(query.q.qname).lower().rstrip(".")
    with open(log_path, "a") as log:
        log.write(f"{name} {QTYPE[query.q.qtype]}\n")
    reply = query.reply()
    if name not in zone:
        reply.header.rcode = RCODE.NXDOMAIN
    while name in zone:
        kind, value, ttl = zone[name]
        if kind == "CNAME":
            reply.add_answer(RR(name, QTYPE.CNAME, rdata=CNAME(value), ttl=ttl))
            name = value
            continue
        if query.q.qtype == QTYPE.A:
            reply.add_answer(RR(name, QTYPE.A, rdata=A(value), ttl=ttl))
        break
    return reply.pack()

def tls_server():  # TLS on TLS_PORT: "<address reached> <SNI seen>" after the handshake
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    def remember(tls, name, ctx):
        tls.sni_seen = name
    context.sni_callback = remember
    listener = socket.create_server(("0.0.0.0", TLS_PORT), backlog=64)
    def one(conn):
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(f"{tls.getsockname()[0]} {getattr(tls, 'sni_seen', None)}".encode())
        except Exception:
            pass
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()

def raw_server():  # speaks first on RAW_PORT: the address reached, then closes
    listener = socket.create_server(("0.0.0.0", RAW_PORT), backlog=64)
    while True:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(conn.getsockname()[0].encode())

def hold_server():  # on HOLD_PORT: keeps each connection open until its client closes it
    listener = socket.create_server(("0.0.0.0", HOLD_PORT), backlog=1024)
    def one(conn):
        with conn:
            try:
                while conn.recv(4096):
                    pass
            except OSError:
                pass
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()

TLS_PORT, RAW_PORT, HOLD_PORT = 8443, 9000, 9001
threading.Thread(target=hold_server, daemon=True).start()
threading.Thread(target=tls_server, daemon=True).start()
threading.Thread(target=raw_server, daemon=True).start()
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((dns_ip, 53))
http = ThreadingHTTPServer(("0.0.0.0", port), Echo)
threading.Thread(target=http.serve_forever, daemon=True).start()
print("ready", flush=True)
while True:
    data, peer = udp.recvfrom(4096)
    udp.sendto(answer(data), peer)
"""

# Runs inside a sandbox: resolve each target and open a TCP connection (an HTTP GET).
PROBE = r"""
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
timeout = float(sys.argv[1])
def one(target):
    host, _, port = target.partition(":")
    try:
        ip = socket.gethostbyname(host)
    except socket.gaierror as exc:
        return "nxdomain" if exc.errno == socket.EAI_NONAME else "dnsfail"
    try:
        conn = socket.create_connection((ip, int(port or 8080)), timeout=timeout)
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return f"error {exc.errno}"
    with conn:  # connected: "ok", plus the HTTP body when there is one
        data = b""
        try:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            while chunk := conn.recv(4096):
                data += chunk
        except OSError:
            pass
    if b"X-Sandlot-Egress: denied" in data.split(b"\r\n\r\n", 1)[0]:
        return data.split(b"\r\n\r\n", 1)[-1].decode().strip()  # the gateway's 403 text
    return ("ok " + data.split(b"\r\n\r\n", 1)[-1].decode()).strip()
with ThreadPoolExecutor(16) as pool:
    print(json.dumps(dict(zip(sys.argv[2:], pool.map(one, sys.argv[2:])))))
"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done


def require_egress() -> None:
    """Skip (locally) or fail (CI) unless the engine, nft, ip and root are all here."""
    require_docker()
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    for tool in ("ip",):
        if shutil.which(tool) is None:
            problems.append(f"{tool} not installed")
    if nft.available():
        problems.append(nft.available())
    if problems:
        message = ("egress enforcement cannot be tested here: " + "; ".join(problems)
                   + ". Run as root after `bash scripts/services.sh install`.")
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


# -- the test internet -------------------------------------------------------------------

def _teardown_world() -> None:
    sh("ip", "rule", "del", "pref", RULE_PREF, check=False)
    sh("ip", "rule", "del", "pref", MARK_RULE_PREF, check=False)
    sh("ip", "route", "flush", "table", ROUTE_TABLE, check=False)
    sh("ip", "link", "del", VETH_HOST, check=False)
    sh("ip", "netns", "del", NETNS, check=False)


@dataclass
class World:
    dns_log: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def queries(self) -> list[str]:
        """Names the test DNS server was asked for."""
        if not self.dns_log.exists():
            return []
        return [line.split()[0] for line in self.dns_log.read_text().splitlines() if line]

    def check_confined(self) -> None:
        """Traffic from the test pool can only reach the namespace (or nowhere)."""
        rules = sh("ip", "rule", "list", "pref", RULE_PREF).stdout
        assert f"from {POOL} lookup {ROUTE_TABLE}" in rules, rules
        marked = sh("ip", "rule", "list", "pref", MARK_RULE_PREF).stdout
        assert f"fwmark {GATEWAY_MARK} lookup {ROUTE_TABLE}" in marked, marked
        table = sh("ip", "route", "show", "table", ROUTE_TABLE).stdout
        assert "blackhole default" in table, table
        for route in ROUTES:
            assert f"{route.removesuffix('/32')} dev {VETH_HOST}" in table, table
        main = sh("ip", "route", "show", "dev", VETH_HOST).stdout
        assert main.split() == [DNS_IP, "scope", "link"], main  # the host's only route here


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A throwaway certificate for the test world's TLS server (clients do not verify)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test world")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "world.crt", folder / "world.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    require_egress()
    WORLD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    lock = WORLD_LOCK.open("a")
    fcntl.flock(lock, fcntl.LOCK_EX)  # another run's world on this machine: wait for it
    tmp = tmp_path_factory.mktemp("egress-world")
    result = World(dns_log=tmp / "dns-queries.log")
    try:
        _teardown_world()  # what a killed run may have left (same fixed names)
        sh("ip", "netns", "add", NETNS)
        sh("ip", "link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NS)
        sh("ip", "link", "set", VETH_NS, "netns", NETNS)
        sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", VETH_HOST, "noprefixroute")
        sh("ip", "link", "set", VETH_HOST, "up")
        sh("ip", "route", "add", f"{DNS_IP}/32", "dev", VETH_HOST)  # the resolver's upstream
        for address in NS_ADDRESSES:
            sh("ip", "-n", NETNS, "addr", "add", address, "dev", VETH_NS)
        sh("ip", "-n", NETNS, "link", "set", "lo", "up")
        sh("ip", "-n", NETNS, "link", "set", VETH_NS, "up")
        sh("ip", "-n", NETNS, "route", "add", "default", "via", HOST_IP)
        # Sandbox traffic (from the test pool): the namespace or nothing. Replies to the
        # sandboxes themselves go back to the main table (throw).
        for route in ROUTES:
            sh("ip", "route", "add", route, "dev", VETH_HOST, "table", ROUTE_TABLE)
        sh("ip", "route", "add", "throw", POOL, "table", ROUTE_TABLE)
        sh("ip", "route", "add", "blackhole", "default", "table", ROUTE_TABLE)
        sh("ip", "rule", "add", "pref", RULE_PREF, "from", POOL, "lookup", ROUTE_TABLE)
        sh("ip", "rule", "add", "pref", MARK_RULE_PREF, "fwmark", GATEWAY_MARK, "lookup",
           ROUTE_TABLE)
        script = tmp / "world.py"
        script.write_text(WORLD)
        cert, key = _self_signed(tmp)
        process = subprocess.Popen(
            ["ip", "netns", "exec", NETNS, sys.executable, str(script), json.dumps(ZONE),
             DNS_IP, str(result.dns_log), str(HTTP_PORT), str(cert), str(key)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        result.processes.append(process)
        line = process.stdout.readline() if process.stdout else ""
        assert line.strip() == "ready", f"test world did not start: {line}"
        result.check_confined()
        yield result
    finally:
        for process in result.processes:
            process.terminate()
            process.wait(timeout=10)
        _teardown_world()
        lock.close()


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("egress-state")


@pytest.fixture(scope="module")
def egress_env(world: World, state_dir: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SANDBOX_EGRESS_STATE_DIR", str(state_dir))
        patch.setenv("SANDBOX_DNS_UPSTREAM", DNS_IP)
        patch.setenv("SANDBOX_EGRESS_SUBNETS", POOL)
        patch.setenv("SANDBOX_EGRESS_GATEWAY_MARK", GATEWAY_MARK)
        yield


@pytest.fixture(scope="module")
def sandboxes(egress_env, state_dir: Path) -> Iterator[Harness]:
    backend = DockerBackend(docker_settings())
    harness = Harness("docker", backend, BASE_IMAGE)
    try:
        yield harness
    finally:
        harness.cleanup()
        backend.egress.cleanup_orphans(grace_sec=0, metadata={RUN_LABEL: RUN_ID})
        _stop_resolver(state_dir)
        _stop_gateway(state_dir)
        backend.close()


def _stop_resolver(state_dir: Path) -> None:
    _stop_daemon(dns.pid_path(state_dir), dns.lock_path(state_dir))


def _stop_gateway(state_dir: Path, signal: int = 15) -> None:
    _stop_daemon(gateway.pid_path(state_dir), gateway.lock_path(state_dir), signal)


def _stop_daemon(pid_file: Path, lock: Path, signal: int = 15) -> None:
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while manager.holds_lock(lock) and time.monotonic() < deadline:
            time.sleep(0.1)


def policy(*, deny_all: bool = False, allow: tuple[str, ...] = (),
           deny: tuple[str, ...] = ()) -> ResolvedNetworkPolicy:
    """As resolve_policy makes it: deny-by-default adds 0.0.0.0/0 to deny_out."""
    return ResolvedNetworkPolicy(allow_internet_access=not deny_all, allow_out=allow,
                                 deny_out=deny + (("0.0.0.0/0",) if deny_all else ()))


def probe(harness: Harness, sandbox: SandboxInfo, *targets: str,
          timeout: float = 2.0) -> dict[str, str]:
    command = f"python3 -c {shlex.quote(PROBE)} {timeout} {' '.join(targets)}"
    result = harness.backend.exec(sandbox.id, command, timeout_sec=60)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def egress_id(harness: Harness, sandbox: SandboxInfo) -> str:
    data = harness.backend.api.inspect_container(sandbox.id)
    found = manager.egress_id_of(data)
    assert found, data["HostConfig"]["NetworkMode"]
    return found


class _Denied(str):
    """A probe's result for a connection the gateway refused: its 403 text (which names
    the rule, checked where it matters) or a reset."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("denied by Sandlot egress policy")

    __hash__ = str.__hash__


DENIED = _Denied("denied by Sandlot egress policy")


def reached(ip: str) -> str:
    return f"ok {ip}"


# -- the cases ---------------------------------------------------------------------------

def test_open_policy_reaches_public_targets_and_resolves_everything(world, sandboxes):
    sandbox = sandboxes.create()

    result = probe(sandboxes, sandbox, A, B, "good.test.example")

    assert result == {A: reached(A), B: reached(B), "good.test.example": reached(GOOD)}
    net_id = egress_id(sandboxes, sandbox)
    network = sandboxes.backend.api.inspect_network(f"sandlot-{net_id}")
    assert network["Options"]["com.docker.network.bridge.name"] == f"sl-{net_id}"
    assert network["Labels"][RUN_LABEL] == RUN_ID  # the sandbox metadata, for cleanup
    assert network["Labels"]["sandlot_session_id"] == sandbox.metadata["sandlot_session_id"]


def test_deny_out_blocks_only_that_ip(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny=(B,)))

    assert probe(sandboxes, sandbox, A, B) == {A: reached(A), B: DENIED}


def test_deny_by_default_with_an_allowed_ip(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=(A,)))

    result = probe(sandboxes, sandbox, A, B, "good.test.example")

    assert result == {A: reached(A), B: DENIED, "good.test.example": "nxdomain"}


def test_allowed_domain_resolves_and_is_reachable_and_nothing_else_is(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("good.test.example",)))

    result = probe(sandboxes, sandbox, "good.test.example", "bad.test.example", BAD, B)

    assert result == {"good.test.example": reached(GOOD), "bad.test.example": "nxdomain",
                      BAD: DENIED, B: DENIED}
    assert "good.test.example" in world.queries()
    assert "bad.test.example" not in world.queries()  # refused names never leave
    assert GOOD in nft.learned(egress_id(sandboxes, sandbox))


def test_wildcard_covers_subdomains_not_the_apex(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("*.svc.example",)))

    result = probe(sandboxes, sandbox, "a.svc.example", "svc.example", SVC_APEX)

    assert result == {"a.svc.example": reached(SVC_SUB), "svc.example": "nxdomain",
                      SVC_APEX: DENIED}
    assert "svc.example" not in world.queries()


def test_cname_chain_of_an_allowed_name_is_learned(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("cname.test.example",)))

    assert probe(sandboxes, sandbox, "cname.test.example") == {
        "cname.test.example": reached(CNAMED)}


def test_learned_ip_expires_with_the_ttl(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("short.test.example",)))
    net_id = egress_id(sandboxes, sandbox)

    assert probe(sandboxes, sandbox, "short.test.example") == {
        "short.test.example": reached(SHORT)}
    deadline = time.monotonic() + dns_answer.MIN_TTL + 10  # TTL 1 s, kept at least MIN_TTL
    while SHORT in nft.learned(net_id):
        assert time.monotonic() < deadline, "learned IP never expired"
        time.sleep(0.5)

    assert probe(sandboxes, sandbox, SHORT) == {SHORT: DENIED}


def test_allowed_name_pointing_at_a_private_address_is_not_opened(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("rebind.test.example",)))

    assert probe(sandboxes, sandbox, "rebind.test.example") == {
        "rebind.test.example": DENIED}
    assert PRIVATE_IP not in nft.learned(egress_id(sandboxes, sandbox))


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host, bound to every address; yields its port."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()


def test_the_host_is_unreachable_except_its_dns(world, sandboxes, host_server):
    sandbox = sandboxes.create()
    gateway = sandboxes.backend.egress.load(
        egress_id(sandboxes, sandbox)).gateway
    with socket.create_connection((gateway, host_server), timeout=2):
        pass  # the server does answer on the gateway address, from the host itself

    result = probe(sandboxes, sandbox, f"{gateway}:{host_server}", f"{HOST_IP}:{host_server}",
                   "good.test.example")

    assert result == {f"{gateway}:{host_server}": "timeout",
                      f"{HOST_IP}:{host_server}": "timeout",
                      "good.test.example": reached(GOOD)}


def test_metadata_address_is_unreachable_even_when_allowed(world, sandboxes):
    open_box = sandboxes.create()
    allowed = sandboxes.create(network=policy(allow=(METADATA_IP,)))

    assert probe(sandboxes, open_box, METADATA_IP) == {METADATA_IP: DENIED}
    assert probe(sandboxes, allowed, METADATA_IP) == {METADATA_IP: DENIED}


def test_private_range_only_when_named(world, sandboxes):
    open_box = sandboxes.create()
    broad = sandboxes.create(network=policy(allow=("0.0.0.0/0",)))
    named = sandboxes.create(network=policy(deny_all=True, allow=(PRIVATE_IP,)))

    assert probe(sandboxes, open_box, PRIVATE_IP, A) == {PRIVATE_IP: DENIED, A: reached(A)}
    assert probe(sandboxes, broad, PRIVATE_IP) == {PRIVATE_IP: DENIED}
    assert probe(sandboxes, named, PRIVATE_IP, A) == {PRIVATE_IP: reached(PRIVATE_IP),
                                                      A: DENIED}


def test_special_use_targets_are_unreachable_unless_named(world, sandboxes):
    """Issue 11 item 4: from an open policy, TEST-NET-1 and the benchmarking range were
    reachable. Like the private ranges, they open only where allow_out names them."""
    open_box = sandboxes.create()
    broad = sandboxes.create(network=policy(allow=("0.0.0.0/0",)))
    named = sandboxes.create(network=policy(deny_all=True,
                                            allow=(TEST_NET_1, "198.18.0.0/15")))

    assert probe(sandboxes, open_box, TEST_NET_1, BENCHMARK, A) == {
        TEST_NET_1: DENIED, BENCHMARK: DENIED, A: reached(A)}
    assert probe(sandboxes, broad, TEST_NET_1, BENCHMARK) == {
        TEST_NET_1: DENIED, BENCHMARK: DENIED}
    assert probe(sandboxes, named, TEST_NET_1, BENCHMARK, A) == {
        TEST_NET_1: reached(TEST_NET_1), BENCHMARK: reached(BENCHMARK), A: DENIED}


def test_allowed_name_answered_in_a_special_use_range_is_not_learned(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True,
                                              allow=("benchmark.test.example",)))
    open_box = sandboxes.create()

    assert probe(sandboxes, sandbox, "benchmark.test.example") == {
        "benchmark.test.example": DENIED}
    assert "benchmark.test.example" in world.queries()  # answered, and refused anyway
    assert BENCHMARK_DNS not in nft.learned(egress_id(sandboxes, sandbox))
    assert probe(sandboxes, open_box, "benchmark.test.example") == {
        "benchmark.test.example": DENIED}


def test_policy_is_fixed_at_creation(world, sandboxes):
    first = sandboxes.create(network=policy(deny=(B,)))
    second = sandboxes.create(network=policy(deny=(A,)))  # "the config was edited"

    assert probe(sandboxes, first, A, B) == {A: reached(A), B: DENIED}
    assert probe(sandboxes, second, A, B) == {A: DENIED, B: reached(B)}


def test_delete_removes_network_rules_and_state(world, sandboxes, state_dir):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("good.test.example",)))
    net_id = egress_id(sandboxes, sandbox)
    state_file = dns.sandboxes_dir(state_dir) / f"{net_id}.json"
    assert state_file.exists() and net_id in nft.sandbox_ids()

    sandboxes.backend.delete(sandbox.id)

    with pytest.raises(docker.errors.NotFound):
        sandboxes.backend.api.inspect_network(f"sandlot-{net_id}")
    assert net_id not in nft.sandbox_ids()
    assert not state_file.exists()
    assert f"sl-{net_id}" not in sh("ip", "-br", "link").stdout


def test_resume_restores_lost_rules_and_resolver(world, sandboxes, state_dir):
    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("good.test.example",)))
    net_id = egress_id(sandboxes, sandbox)
    sandboxes.backend.pause(sandbox.id)
    nft.remove(net_id)  # as after a host reboot
    _stop_resolver(state_dir)

    sandboxes.backend.connect(sandbox.id)

    assert nft.has_sandbox(net_id)
    assert probe(sandboxes, sandbox, "good.test.example", B) == {
        "good.test.example": reached(GOOD), B: DENIED}


def test_names_do_not_resolve_while_the_resolver_is_down(world, sandboxes, state_dir,
                                                        monkeypatch):
    sandbox = sandboxes.create()
    with monkeypatch.context() as patch:  # no revival before the command: the resolver stays down
        patch.setattr(type(sandboxes.backend.egress), "revive", lambda self, net_id: None)
        _stop_resolver(state_dir)
        assert probe(sandboxes, sandbox, "good.test.example", A) == {
            "good.test.example": "dnsfail", A: reached(A)}

    assert probe(sandboxes, sandbox, "good.test.example") == {  # the next command revives it
        "good.test.example": reached(GOOD)}


def test_resolver_answers_over_tcp(world, sandboxes):
    from dnslib import DNSRecord

    sandbox = sandboxes.create(network=policy(deny_all=True, allow=("good.test.example",)))
    net = sandboxes.backend.egress.load(
        egress_id(sandboxes, sandbox))
    answers = {}
    for name in ("good.test.example", "bad.test.example"):
        query = DNSRecord.question(name).pack()
        with socket.create_connection((net.gateway, 53), timeout=5,
                                      source_address=("127.0.0.1", 0)) as conn:
            conn.sendall(len(query).to_bytes(2, "big") + query)
            size = int.from_bytes(conn.recv(2, socket.MSG_WAITALL), "big")
            answers[name] = DNSRecord.parse(conn.recv(size, socket.MSG_WAITALL))

    assert [str(rr.rdata) for rr in answers["good.test.example"].rr] == [GOOD]
    assert answers["bad.test.example"].header.rcode == 3  # NXDOMAIN


def test_cleanup_orphans_removes_what_a_vanished_container_left(world, sandboxes, state_dir):
    sandbox = sandboxes.create()
    net_id = egress_id(sandboxes, sandbox)
    sandboxes.backend.api.remove_container(sandbox.id, force=True)  # behind our back
    egress = sandboxes.backend.egress

    assert net_id not in egress.cleanup_orphans(metadata={RUN_LABEL: RUN_ID})  # grace period
    removed = egress.cleanup_orphans(grace_sec=0, metadata={RUN_LABEL: RUN_ID})

    assert net_id in removed
    assert net_id not in nft.sandbox_ids()
    assert not (dns.sandboxes_dir(state_dir) / f"{net_id}.json").exists()
    with pytest.raises(docker.errors.NotFound):
        sandboxes.backend.api.inspect_network(f"sandlot-{net_id}")


def test_the_host_sweep_releases_what_another_process_s_removal_left(world, sandboxes,
                                                                    state_dir):
    """Issue 28: a session ended through the API is removed by a worker; one that keeps
    its state elsewhere removed the container, the network and the rules, but this
    host's loop disk and egress state file stayed until it restarted. The reaper's sweep
    releases them (their disk is backdated past the grace a create in progress has)."""
    from app.backends.docker import disk as docker_disk

    sandbox = sandboxes.create(disk_limit_mb=64)
    net_id = egress_id(sandboxes, sandbox)
    api = sandboxes.backend.api
    disk_id = docker_disk.disk_of(api.inspect_container(sandbox.id))
    image = docker_disk.disk_dir() / f"{disk_id}.img"
    state_file = dns.sandboxes_dir(state_dir) / f"{net_id}.json"
    api.remove_container(sandbox.id, force=True)  # what the other process's delete does
    api.remove_network(f"sandlot-{net_id}")
    nft.remove(net_id)
    assert image.exists() and state_file.exists()

    first = sandboxes.backend.sweep_leftovers()  # a state file without its network: gone

    assert f"network {net_id}" in first and not state_file.exists()
    assert f"disk {disk_id}" not in first and image.exists()  # young: a create's, maybe
    old = time.time() - docker_disk.ORPHAN_GRACE_SEC - 60
    os.utime(image, (old, old))
    assert f"disk {disk_id}" in sandboxes.backend.sweep_leftovers()
    assert not image.exists() and not (docker_disk.disk_dir() / disk_id).exists()


def test_without_enforcement_a_restricting_policy_is_refused(world, sandboxes, monkeypatch):
    backend = sandboxes.backend
    monkeypatch.setattr(backend.egress, "unavailable_reason", lambda: "no nft in this test")

    with pytest.raises(BackendError, match="cannot be enforced: no nft in this test"):
        sandboxes.create(network=policy(deny=(B,)))
    with pytest.raises(BackendError, match="cannot be enforced"):
        sandboxes.create(network=policy(deny_all=True, allow=("good.test.example",)))
    open_box = sandboxes.create()  # nothing to enforce in the policy: the default bridge

    assert backend.api.inspect_container(open_box.id)["HostConfig"]["NetworkMode"] == "bridge"


def test_control_without_our_rules_the_blocked_targets_answer(world, sandboxes, host_server):
    """The blocks above are ours: the same sandbox with its nft rules removed reaches
    the host, the private, special-use and metadata targets of the test world."""
    sandbox = sandboxes.create(network=policy(deny=(B,)))
    net_id = egress_id(sandboxes, sandbox)
    gateway = sandboxes.backend.egress.load(net_id).gateway
    nft.remove(net_id)

    result = probe(sandboxes, sandbox, METADATA_IP, PRIVATE_IP, TEST_NET_1, BENCHMARK, B,
                   f"{gateway}:{host_server}")

    assert result == {METADATA_IP: reached(METADATA_IP), PRIVATE_IP: reached(PRIVATE_IP),
                      TEST_NET_1: reached(TEST_NET_1), BENCHMARK: reached(BENCHMARK),
                      B: reached(B), f"{gateway}:{host_server}": "ok"}
    sandboxes.backend.delete(sandbox.id)


def test_queries_from_outside_the_sandbox_subnet_are_ignored(world, sandboxes):
    from dnslib import DNSRecord

    sandbox = sandboxes.create()
    net = sandboxes.backend.egress.load(egress_id(sandboxes, sandbox))
    assert manager.probe(net)  # from loopback: answered
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((HOST_IP, 0))  # another address of this host
        sock.settimeout(1)
        sock.sendto(DNSRecord.question("good.test.example").pack(), (net.gateway, 53))
        with pytest.raises(TimeoutError):
            sock.recv(4096)


def test_resolver_listens_only_while_the_bridge_exists(world, sandboxes, tmp_path):
    """A state file whose network was removed elsewhere must not keep port 53 of its
    gateway address busy for a later network on the same subnet."""
    from app.backends.docker.egress.policy import EgressPolicy, SandboxNet

    api = sandboxes.backend.api
    net = SandboxNet(RUN_ID[:10], "10.214.255.240/28", "10.214.255.241", None, EgressPolicy())
    dns.sandboxes_dir(tmp_path).mkdir()
    (dns.sandboxes_dir(tmp_path) / f"{net.id}.json").write_text(json.dumps(net.as_dict()))
    resolver = dns.Resolver(tmp_path)
    try:
        resolver.rescan()
        assert resolver.served == {}  # no bridge yet
        api.create_network(net.network, driver="bridge", labels={RUN_LABEL: RUN_ID},
                           options={"com.docker.network.bridge.name": net.bridge},
                           ipam=docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(
                               subnet=net.subnet, gateway=net.gateway)]))
        resolver.rescan()
        assert list(resolver.served) == [net.id]
        api.remove_network(net.network)
        resolver.rescan()
        assert resolver.served == {}
    finally:
        resolver.close()
        try:
            api.remove_network(net.network)
        except docker.errors.NotFound:
            pass


# -- without an engine: the policy as enforced, the ruleset text, the resolver's choices --

def test_policy_splits_allow_out_and_keeps_private_ranges_closed_unless_named():
    from app.backends.docker.egress.policy import EgressPolicy, learnable

    egress = EgressPolicy.from_resolved(ResolvedNetworkPolicy(
        allow_internet_access=False, allow_out=("1.2.3.4", "1.2.3.0/24", "10.1.2.3",
                                                "Good.Example.", "*.svc.example"),
        deny_out=("0.0.0.0/0", "9.9.9.9")))

    assert egress.deny_all
    assert egress.allow == ("1.2.3.0/24", "10.1.2.3/32")  # merged: nft refuses overlaps
    assert egress.private_allow == ("10.1.2.3/32",)
    assert egress.deny == ("9.9.9.9/32",)
    assert egress.domains == ("good.example", "*.svc.example")
    assert egress.allows_name("good.example") and egress.allows_name("GOOD.example.")
    assert not egress.allows_name("x.good.example")
    assert egress.allows_name("a.svc.example") and egress.allows_name("a.b.svc.example")
    assert not egress.allows_name("svc.example") and not egress.allows_name("xsvc.example")
    broad = EgressPolicy.from_resolved(ResolvedNetworkPolicy(allow_out=("0.0.0.0/0",)))
    assert broad.private_allow == () and not broad.deny_all
    assert learnable(A)
    assert not any(learnable(ip) for ip in ("10.0.0.1", "172.16.0.1", "192.168.1.1",
                                            "100.64.0.1", "127.0.0.1", "169.254.169.254",
                                            "192.0.2.1", "198.18.0.5", "203.0.113.9"))


def test_ruleset_order_is_never_then_named_special_then_special_then_allow_deny_default():
    from app.backends.docker.egress.policy import EgressPolicy, SandboxNet

    net = SandboxNet("0123456789", "10.213.0.0/28", "10.213.0.1", "192.0.2.53:53",
                     EgressPolicy(deny_all=True, allow=("10.1.2.3/32",)))
    rules = [line.split(" sb_0123456789_out ", 1)[1]
             for line in nft.sandbox_script(net).splitlines()
             if line.startswith("add rule inet sandlot sb_0123456789_out ")]

    assert rules == [
        "ct state established,related return",
        "meta nfproto != ipv4 counter drop",
        "ip daddr { 0.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4, 240.0.0.0/4 } counter drop",
        "ip daddr @sb_0123456789_private return",
        "ip daddr { 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 172.16.0.0/12, 192.0.0.0/24, "
        "192.0.2.0/24, 192.88.99.0/24, 192.168.0.0/16, 198.18.0.0/15, 198.51.100.0/24, "
        "203.0.113.0/24 } counter drop",
        "ip daddr @sb_0123456789_allow return",
        "ip daddr @sb_0123456789_dns return",
        "ip daddr @sb_0123456789_deny counter drop",
        "counter drop",
    ]
    assert "table inet sandlot" in nft.BASE and "ip filter" not in nft.sandbox_script(net)


def test_refused_names_are_answered_locally_and_never_forwarded(monkeypatch):
    from dnslib import RCODE, DNSRecord

    from app.backends.docker.egress.policy import EgressPolicy, SandboxNet

    def no_forwarding(*args):
        raise AssertionError("a refused name was forwarded")

    monkeypatch.setattr(dns_answer, "forward", no_forwarding)
    net = SandboxNet("0123456789", "10.213.0.0/28", "10.213.0.1", "192.0.2.53:53",
                     EgressPolicy(deny_all=True, domains=("*.svc.example",)))

    for name in ("svc.example", "data-to-steal.attacker.example", "x.svc.example.evil"):
        reply = DNSRecord.parse(dns_answer.answer(net, DNSRecord.question(name).pack()))
        assert reply.header.rcode == RCODE.NXDOMAIN, name
    probe_other = DNSRecord.question(f"ffffffffff{dns_answer.PROBE_SUFFIX}").pack()
    assert DNSRecord.parse(dns_answer.answer(net, probe_other)).header.rcode == RCODE.REFUSED
    assert dns_answer.answer(net, b"\x00garbage") is None


# Runs inside a sandbox: open many TCP connections to its resolver, send nothing, hold.
SLOW_TCP = r"""
import socket, sys, time
conns = []
for _ in range(int(sys.argv[2])):
    try:
        conns.append(socket.create_connection((sys.argv[1], 53), timeout=2))
    except OSError:
        pass
print(len(conns), flush=True)
time.sleep(float(sys.argv[3]))
"""


def test_slow_tcp_clients_of_one_sandbox_do_not_stall_another(world, sandboxes):
    """The issue's attack: forty idle TCP connections from one sandbox held every
    resolver worker, so every other sandbox's lookups waited 10 s."""
    attacker, victim = sandboxes.create(), sandboxes.create()
    gateway = sandboxes.backend.egress.load(egress_id(sandboxes, attacker)).gateway
    command = f"python3 -c {shlex.quote(SLOW_TCP)} {gateway} 40 12"
    attack = threading.Thread(target=sandboxes.backend.exec, args=(attacker.id, command),
                              kwargs={"timeout_sec": 30})
    attack.start()
    try:
        time.sleep(3)  # the connections are open and idle
        started = time.monotonic()
        result = probe(sandboxes, victim, "good.test.example")
        elapsed = time.monotonic() - started
    finally:
        attack.join(40)

    assert result == {"good.test.example": reached(GOOD)}
    assert elapsed < 4, f"the victim's lookup took {elapsed:.1f} s"


def test_a_query_flood_from_one_sandbox_does_not_stall_another(world, sandboxes):
    """Thousands of UDP queries a second from one sandbox: its share of the resolver
    (and of the upstream) is bounded, so another's lookup is answered at once."""
    attacker, victim = sandboxes.create(), sandboxes.create()
    gateway = sandboxes.backend.egress.load(egress_id(sandboxes, attacker)).gateway
    flood = ("import os, socket, struct, sys, time\n"
             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "end = time.monotonic() + 10\n"
             "i = 0\n"
             "while time.monotonic() < end:\n"
             "    i += 1\n"
             "    name = b''.join(bytes([len(p)]) + p for p in "
             "(os.urandom(6).hex().encode(), b'slow', b'test', b'example')) + b'\\0'\n"
             "    s.sendto(struct.pack('!HHHHHH', i & 0xffff, 0x100, 1, 0, 0, 0) + name + "
             "struct.pack('!HH', 1, 1), (sys.argv[1], 53))\n"
             "    if i % 50 == 0: time.sleep(0.01)\n")
    command = f"python3 -c {shlex.quote(flood)} {gateway}"
    attack = threading.Thread(target=sandboxes.backend.exec, args=(attacker.id, command),
                              kwargs={"timeout_sec": 30})
    attack.start()
    try:
        time.sleep(3)
        started = time.monotonic()
        result = probe(sandboxes, victim, "good.test.example")
        elapsed = time.monotonic() - started
    finally:
        attack.join(40)

    assert result == {"good.test.example": reached(GOOD)}
    assert elapsed < 4, f"the victim's lookup took {elapsed:.1f} s"


# -- the gateway (issue 24): decisions by name, relayed by the host ------------------------

TLS_PORT, RAW_PORT = 8443, 9000
CLIENT = r"""
import socket, ssl, sys
mode, ip, port, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
try:
    conn = socket.create_connection((ip, port), timeout=10)
except OSError as exc:
    print(f"connect {type(exc).__name__}")
    sys.exit()
try:
    if mode == "tls":
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn = context.wrap_socket(conn, server_hostname=None if name == "-" else name)
        data = conn.recv(4096)
    elif mode == "http":
        conn.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(4096):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        data = head.split(b"\r\n")[0][9:12] + b" " + body
    else:
        data = conn.recv(4096)
    print(data.decode(errors="replace").strip() or "empty")
except (OSError, ssl.SSLError) as exc:
    print(f"failed {type(exc).__name__}")
"""


def connect(harness: Harness, sandbox: SandboxInfo, mode: str, ip: str, port: int,
            name: str = "-") -> str:
    command = f"python3 -c {shlex.quote(CLIENT)} {mode} {ip} {port} {shlex.quote(name)}"
    result = harness.backend.exec(sandbox.id, command, timeout_sec=30)
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def named(*, allow: tuple[str, ...] = (), deny_all: bool = True) -> ResolvedNetworkPolicy:
    return dataclasses.replace(policy(deny_all=deny_all, allow=allow), name="Tenant sandbox")


@pytest.fixture(scope="module")
def by_name(sandboxes) -> SandboxInfo:
    """Deny by default; one exact name, one wildcard, one address."""
    return sandboxes.create(network=named(allow=("good.test.example", "*.svc.example", A)))


def log_rows(state_dir: Path, net_id: str, count: int, since: float) -> list[dict]:
    deadline = time.monotonic() + 5
    while True:
        rows = [r for r in log_files.since(state_dir, net_id, log_files.Mark(0, 0))
                if r["t"] >= since]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_plain_http_is_decided_by_its_host_and_a_denial_names_config_host_and_rule(
        world, sandboxes, by_name):
    assert connect(sandboxes, by_name, "http", GOOD, HTTP_PORT, "good.test.example") == \
        f"200 {GOOD}"
    assert connect(sandboxes, by_name, "http", GOOD, HTTP_PORT, "bad.test.example") == (
        "403 denied by Sandlot egress policy of 'Tenant sandbox': bad.test.example is not in "
        "allow_out, and egress is denied by default (rule: default deny); ask an admin")


def test_tls_is_decided_by_its_sni_and_passed_through_untouched(world, sandboxes, by_name):
    # The server's own certificate and the SNI the client sent arrive: no interception.
    assert connect(sandboxes, by_name, "tls", GOOD, TLS_PORT, "good.test.example") == \
        f"{GOOD} good.test.example"
    assert connect(sandboxes, by_name, "tls", GOOD, TLS_PORT, "bad.test.example") == \
        "failed ConnectionResetError"
    assert connect(sandboxes, by_name, "tls", SVC_SUB, TLS_PORT, "a.svc.example") == \
        f"{SVC_SUB} a.svc.example"
    assert connect(sandboxes, by_name, "tls", SVC_APEX, TLS_PORT, "svc.example") == \
        "failed ConnectionResetError"  # a wildcard covers subdomains, not the apex
    assert connect(sandboxes, by_name, "tls", B, TLS_PORT, "-") == \
        "failed ConnectionResetError"  # no name: the address decides


def test_an_allowed_name_sent_to_another_address_reaches_only_the_name_s_own(
        world, sandboxes, by_name):
    """The attack: present an allowed name (SNI or Host) to an address the policy denies.
    The gateway connects to what our resolver answers for the name, never to the
    address the sandbox chose."""
    assert connect(sandboxes, by_name, "tls", BAD, TLS_PORT, "good.test.example") == \
        f"{GOOD} good.test.example"
    assert connect(sandboxes, by_name, "http", BAD, HTTP_PORT, "good.test.example") == \
        f"200 {GOOD}"
    assert connect(sandboxes, by_name, "tls", PRIVATE_IP, TLS_PORT, "good.test.example") == \
        f"{GOOD} good.test.example"


def test_an_allowed_name_answered_with_a_private_address_is_not_connected(world, sandboxes):
    sandbox = sandboxes.create(network=named(allow=("rebind.test.example",)))

    assert connect(sandboxes, sandbox, "tls", GOOD, TLS_PORT, "rebind.test.example") == \
        "failed ConnectionResetError"


def test_other_tcp_to_an_allowed_address_is_relayed_even_when_the_server_speaks_first(
        world, sandboxes, by_name):
    assert connect(sandboxes, by_name, "raw", A, RAW_PORT) == A
    assert connect(sandboxes, by_name, "raw", B, RAW_PORT) == "failed ConnectionResetError"


def test_every_connection_is_a_row_of_the_sandbox_egress_log(world, sandboxes, state_dir):
    sandbox = sandboxes.create(network=named(allow=("good.test.example",)))
    net_id = egress_id(sandboxes, sandbox)
    since = time.time() - 1
    connect(sandboxes, sandbox, "tls", BAD, TLS_PORT, "good.test.example")
    connect(sandboxes, sandbox, "http", GOOD, HTTP_PORT, "bad.test.example")
    connect(sandboxes, sandbox, "raw", B, RAW_PORT)

    rows = log_rows(state_dir, net_id, 3, since)

    assert [(r["protocol"], r["host"], r["address"], r["port"], r["verdict"], r["rule"])
            for r in rows] == [
        ("tls", "good.test.example", GOOD, TLS_PORT, "allowed", "allow_out[0] good.test.example"),
        ("http", "bad.test.example", GOOD, HTTP_PORT, "denied", "default deny"),
        ("tcp", None, B, RAW_PORT, "denied", "default deny"),
    ]
    assert rows[0]["sent"] > 100 and rows[0]["received"] > 100  # a ClientHello, a handshake
    assert all(r["t"] >= since for r in rows)


def test_a_stopped_gateway_fails_closed_and_the_next_command_brings_it_back(
        world, sandboxes, state_dir, monkeypatch):
    sandbox = sandboxes.create(network=named(allow=("good.test.example",)))
    assert connect(sandboxes, sandbox, "tls", GOOD, TLS_PORT, "good.test.example") == \
        f"{GOOD} good.test.example"
    with monkeypatch.context() as patch:
        patch.setattr(type(sandboxes.backend.egress), "revive", lambda self, net_id: None)
        _stop_gateway(state_dir, signal=9)

        assert connect(sandboxes, sandbox, "tls", GOOD, TLS_PORT, "good.test.example") == \
            "connect ConnectionRefusedError"
        assert connect(sandboxes, sandbox, "raw", A, RAW_PORT) == \
            "connect ConnectionRefusedError"

    assert connect(sandboxes, sandbox, "tls", GOOD, TLS_PORT, "good.test.example") == \
        f"{GOOD} good.test.example"
    assert sandboxes.backend.egress.gateway_running()


def test_the_supervisor_starts_a_killed_gateway_again_without_waiting_for_a_command(
        world, sandboxes, state_dir, monkeypatch):
    sandbox = sandboxes.create(network=named(allow=("good.test.example",)))
    daemons = manager.Daemons(sandboxes.backend.egress.settings)
    monkeypatch.setattr(type(sandboxes.backend.egress), "revive", lambda self, net_id: None)
    _stop_gateway(state_dir, signal=9)
    assert connect(sandboxes, sandbox, "tls", GOOD, TLS_PORT, "good.test.example") == \
        "connect ConnectionRefusedError"

    assert daemons.supervise() == ["gateway"]

    assert connect(sandboxes, sandbox, "tls", GOOD, TLS_PORT, "good.test.example") == \
        f"{GOOD} good.test.example"
    assert daemons.supervise() == []


def test_a_policy_applied_to_a_running_sandbox_is_enforced_at_once(world, sandboxes):
    """An admin's 'also for its running sandboxes': names (resolver and gateway) and
    addresses (nft sets) of the new policy hold for the very next connection."""
    sandbox = sandboxes.create(network=named(allow=("good.test.example",)))
    assert connect(sandboxes, sandbox, "tls", BAD, TLS_PORT, "later.test.example") == \
        "failed ConnectionResetError"
    assert connect(sandboxes, sandbox, "raw", A, RAW_PORT) == "failed ConnectionResetError"
    assert probe(sandboxes, sandbox, "later.test.example") != \
        {"later.test.example": reached(BAD)}

    assert sandboxes.backend.apply_network_policy(
        sandbox.id, named(allow=("good.test.example", "later.test.example", A)))

    deadline = time.monotonic() + 5  # the daemons re-read the state file when woken
    while (connect(sandboxes, sandbox, "tls", BAD, TLS_PORT, "later.test.example")
           != f"{BAD} later.test.example" and time.monotonic() < deadline):
        time.sleep(0.2)
    assert connect(sandboxes, sandbox, "tls", BAD, TLS_PORT, "later.test.example") == \
        f"{BAD} later.test.example"
    assert connect(sandboxes, sandbox, "raw", A, RAW_PORT) == A
    assert probe(sandboxes, sandbox, "later.test.example") == {"later.test.example": reached(BAD)}
    # Narrowing works the same way: what is no longer allowed is refused again.
    assert sandboxes.backend.apply_network_policy(sandbox.id, named(allow=("good.test.example",)))
    time.sleep(0.5)
    assert connect(sandboxes, sandbox, "raw", A, RAW_PORT) == "failed ConnectionResetError"
    assert connect(sandboxes, sandbox, "tls", BAD, TLS_PORT, "later.test.example") == \
        "failed ConnectionResetError"


def test_a_sandbox_without_a_network_of_its_own_keeps_its_policy(world, sandboxes):
    sandbox = sandboxes.create(network=policy(deny_all=True))  # nothing allowed: no network

    assert sandboxes.backend.apply_network_policy(sandbox.id, named(allow=("good.test.example",))) \
        is False


def test_a_command_s_result_lists_what_the_gateway_refused_during_it(world, sandboxes, by_name):
    denied_twice = (f"python3 -c {shlex.quote(CLIENT)} http {GOOD} {HTTP_PORT} bad.test.example;"
                    f" python3 -c {shlex.quote(CLIENT)} http {BAD} {HTTP_PORT} bad.test.example;"
                    f" python3 -c {shlex.quote(CLIENT)} tls {GOOD} {TLS_PORT} good.test.example;"
                    f" python3 -c {shlex.quote(CLIENT)} raw {B} {RAW_PORT} -")

    result = sandboxes.backend.exec(by_name.id, denied_twice, timeout_sec=60)

    assert result.egress_denied == (
        {"host": B, "port": RAW_PORT, "count": 1},
        {"host": "bad.test.example", "port": HTTP_PORT, "count": 2},
    )
    assert sandboxes.backend.exec(by_name.id, "true").egress_denied == ()  # only its own


HOLD_PORT = 9001
HOLD = r"""
import socket, sys, time
ip, n, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
held = []
for _ in range(n):
    s = socket.create_connection((ip, 9001), timeout=10)
    s.sendall(b"hello\\n")
    held.append(s)
time.sleep(wait)
alive = 0
for s in held:  # still open: nothing to read yet (b"" or a reset: closed)
    s.setblocking(False)
    try:
        s.recv(1)
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
print(len(held), alive)
"""


def hold(harness: Harness, sandbox: SandboxInfo, n: int, wait: float) -> tuple[int, int]:
    command = f"python3 -c {shlex.quote(HOLD)} {A} {n} {wait}"
    result = harness.backend.exec(sandbox.id, command, timeout_sec=120)
    assert result.exit_code == 0, result.stderr
    held, alive = result.stdout.split()
    return int(held), int(alive)


def _gateway_pid(state_dir: Path) -> int:
    return int(gateway.pid_path(state_dir).read_text())


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])


def test_one_sandbox_holds_at_most_its_share_of_the_gateway(world, sandboxes):
    sandbox = sandboxes.create(network=named(allow=(A,)))

    held, alive = hold(sandboxes, sandbox, gateway.PER_SANDBOX + 4, wait=2)

    assert (held, alive) == (gateway.PER_SANDBOX + 4, gateway.PER_SANDBOX)


def test_a_thousand_open_connections_leave_the_gateways_memory_flat(world, sandboxes,
                                                                     state_dir):
    boxes = [sandboxes.create(network=named(allow=(A,))) for _ in range(4)]
    pid = _gateway_pid(state_dir)
    base_fds = len(os.listdir(f"/proc/{pid}/fd"))
    base = _rss_kib(pid)
    peaks = []
    for round_ in range(2):
        # The gateway lets go of the last round's connections (it closes a relay once both
        # ways have ended), so each sandbox's share (256) is free for the next 250.
        deadline = time.monotonic() + 60
        while len(os.listdir(f"/proc/{pid}/fd")) > base_fds + 16:
            assert time.monotonic() < deadline, "the last round's connections never closed"
            time.sleep(0.2)
        results: list[tuple[int, int]] = []

        def one(box: SandboxInfo, into: list = results) -> None:
            into.append(hold(sandboxes, box, 250, wait=8))

        threads = [threading.Thread(target=one, args=(b,)) for b in boxes]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(os.listdir(f"/proc/{pid}/fd")) < base_fds + 2000:  # both ends of each
            assert time.monotonic() < deadline, "the connections never all opened"
            time.sleep(0.2)
        peaks.append(_rss_kib(pid))
        for thread in threads:
            thread.join(120)
        assert results == [(250, 250)] * 4, (round_, results)

    per_connection = (peaks[0] - base) / 1000
    assert per_connection < 64, f"{per_connection:.1f} KiB per open connection"
    assert peaks[1] - peaks[0] < 4096, (base, peaks)  # a second thousand: no growth
    assert pid == _gateway_pid(state_dir)
