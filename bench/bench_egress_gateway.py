"""The egress gateway (issue 24), in one run, against the same server reached directly:

- TTFB of an HTTPS request (TCP connect, TLS handshake, GET, first response byte) from a
  policed client (its TCP redirected by our nft rules to the gateway, which reads the SNI,
  resolves the allowed name and relays untouched) vs an unpoliced client whose packets
  the host only forwards;
- a 100 MB plain-HTTP download both ways;
- the gateway's resident memory with 0, 100 and 1,000 open TLS connections, and again at
  0 after they closed;
- the egress log's write cost per connection (the gateway's batch writer).

No Docker container is involved, so only the gateway differs between the two sides:
three network namespaces behind veths on this host (the policed client's veth is named
like a sandbox bridge, so the real nft rules and the real gateway daemon serve it), an
upstream server in the third. Everything stays on this machine. Needs root and nft.

    .venv/bin/python bench/bench_egress_gateway.py     # BENCH_NO_DOCS=1: print only
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_exec import write_section  # noqa: E402

from app.backends.docker.egress import gateway, log_files, manager, nft  # noqa: E402
from app.backends.docker.egress.policy import EgressPolicy, SandboxNet  # noqa: E402
from app.backends.docker.egress.settings import ROOT as APP_ROOT  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Egress gateway: HTTPS passthrough, downloads, memory, log cost"
NET_ID = "b0b0b0b0b0"
UP_NS, POLICED_NS, DIRECT_NS = "slb-up", "slb-policed", "slb-direct"
UP_HOST, DIRECT_HOST = "slb-up-h", "slb-direct-h"
BRIDGE = f"sl-{NET_ID}"
UP_NET = "192.31.196"  # globally reachable per IANA (AS112); nobody talks to it
UPSTREAM = f"{UP_NET}.10"
POLICED = ("10.219.0.1", "10.219.0.2")  # (host side = the sandbox's gateway, client)
DIRECT = ("10.219.1.1", "10.219.1.2")
TTFB_ROUNDS = 200
DOWNLOAD_MB = 100
DOWNLOAD_ROUNDS = 5
LINK_MBIT, LINK_ROUNDS = 1000, 3  # downloads again over a shaped "internet link"
LEVELS = (0, 100, 1000, 1000)  # the second 1000: does a second round grow it further?
LOCK = Path("/run/lock/sandlot-egress-tests.lock")  # the egress tests' world uses this net
LOAD_BEFORE = os.getloadavg()[0]

SERVER = r"""
import socket, ssl, sys, threading
from dnslib import A, QTYPE, RR, DNSRecord
cert, key, ip = sys.argv[1], sys.argv[2], sys.argv[3]
BLOCK = b"x" * 65536
def dns():
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind((ip, 53))
    while True:
        data, peer = udp.recvfrom(4096); q = DNSRecord.parse(data); r = q.reply()
        if str(q.q.qname).rstrip(".") == "bench.test" and q.q.qtype == QTYPE.A:
            r.add_answer(RR("bench.test", QTYPE.A, rdata=A(ip), ttl=300))
        udp.sendto(r.pack(), peer)
def http(conn):
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk: return
            head += chunk
        size = int(head.split(b" ")[1].strip(b"/") or 1)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        while size > 0:
            n = min(size, len(BLOCK)); conn.sendall(BLOCK[:n]); size -= n
def tls(conn, context):
    try:
        with context.wrap_socket(conn, server_side=True) as s:
            s.recv(4096); s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            s.recv(1)  # held open until the client closes
    except OSError:
        pass
def serve(port, handler):
    listener = socket.create_server((ip, port), backlog=2048)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handler, args=(conn,), daemon=True).start()
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); context.load_cert_chain(cert, key)
threading.Thread(target=dns, daemon=True).start()
threading.Thread(target=serve, args=(8080, http), daemon=True).start()
threading.Thread(target=serve, args=(8443, lambda c: tls(c, context)), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""

CLIENT = r"""
import json, socket, ssl, sys, time
mode, ip, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
context = ssl.create_default_context(); context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
if mode == "ttfb":
    out = []
    for _ in range(n):
        start = time.perf_counter()
        with socket.create_connection((ip, 8443), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="bench.test") as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n"); s.recv(1)
                out.append((time.perf_counter() - start) * 1000)
    print(json.dumps(out))
elif mode == "download":
    size = n << 20
    start = time.perf_counter()
    with socket.create_connection((ip, 8080), timeout=30) as s:
        s.sendall(b"GET /%d HTTP/1.1\r\nHost: bench.test\r\n\r\n" % size)
        got = 0
        while chunk := s.recv(1 << 20):
            got += len(chunk)
    print(json.dumps([got, time.perf_counter() - start]))
else:  # hold: open n TLS connections, say so, wait for a line on stdin, close them
    held = []
    for _ in range(n):
        raw = socket.create_connection((ip, 8443), timeout=30)
        s = context.wrap_socket(raw, server_hostname="bench.test")
        s.sendall(b"GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n"); s.recv(64)
        held.append(s)
    print(len(held), flush=True)
    sys.stdin.readline()
    for s in held:
        s.close()
"""


def sh(*argv: str, check: bool = True) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def teardown() -> None:
    nft.remove(NET_ID)
    for args in (["iptables", "-D", "DOCKER-USER", "-i", DIRECT_HOST, "-j", "ACCEPT"],
                 ["iptables", "-D", "DOCKER-USER", "-o", DIRECT_HOST, "-j", "ACCEPT"]):
        sh(*args, check=False)
    for link in (UP_HOST, DIRECT_HOST, BRIDGE):
        sh("ip", "link", "del", link, check=False)
    for ns in (UP_NS, POLICED_NS, DIRECT_NS):
        sh("ip", "netns", "del", ns, check=False)


def veth(ns: str, host_name: str, host_ip: str, ns_ip: str, prefix: int) -> None:
    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", host_name, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh("ip", "addr", "add", f"{host_ip}/{prefix}", "dev", host_name)
    sh("ip", "link", "set", host_name, "up")
    sh("ip", "-n", ns, "addr", "add", f"{ns_ip}/{prefix}", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", ns, "route", "add", "default", "via", host_ip)


def in_ns(ns: str, *argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, *argv], **kwargs)


def client(ns: str, mode: str, ip: str, n: int) -> list:
    done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, mode, ip,
                           str(n)], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout)


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(user, system) CPU time of a process, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def downloads(rounds: int, gateway_pid: int) -> tuple[dict[str, list[float]], tuple]:
    """MB/s of each download per side (alternating), and the gateway's (user, system)
    share of one core while its downloads ran."""
    speed: dict[str, list[float]] = {"gateway": [], "direct": []}
    spent = 0.0
    before = cpu_ticks(gateway_pid)
    for _ in range(rounds):
        for name, ns in (("gateway", POLICED_NS), ("direct", DIRECT_NS)):
            got, seconds = client(ns, "download", UPSTREAM, DOWNLOAD_MB)
            assert got > DOWNLOAD_MB << 20, got
            speed[name].append(DOWNLOAD_MB * 1.048576 / seconds)  # MB (10^6) per second
            spent += seconds if name == "gateway" else 0
    after = cpu_ticks(gateway_pid)
    tick = os.sysconf("SC_CLK_TCK")
    return speed, tuple((b - a) / tick / spent for a, b in zip(before, after, strict=True))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def certificate(folder: Path) -> tuple[str, str]:
    from tests.backends.test_egress import _self_signed

    cert, key = _self_signed(folder)
    return str(cert), str(key)


def log_cost(folder: Path, connections: int = 20000) -> float:
    """µs per connection of the gateway's log: one record added, flushed in batches."""
    spool = log_files.Spool(folder)
    record = {"t": time.time(), "meta": {"sandlot_tenant_id": "1", "sandlot_session_id":
              "0" * 36, "sandlot_sandbox_config_id": "0" * 36, "sandlot_purpose": "session"},
              "host": "files.pythonhosted.org", "address": "151.101.0.223", "port": 443,
              "protocol": "tls", "verdict": "allowed", "rule": "allow_out[0] *.pythonhosted.org",
              "sent": 1200, "received": 9_000_000, "ms": 840}
    start = time.perf_counter()
    for i in range(connections):
        spool.add(NET_ID, record)
        if i % 100 == 99:  # a busy sandbox: ~100 connections per flush interval
            spool.flush()
    spool.flush()
    return (time.perf_counter() - start) / connections * 1e6


def main() -> None:
    import fcntl

    LOCK.parent.mkdir(parents=True, exist_ok=True)
    lock = LOCK.open("a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    state = Path(tempfile.mkdtemp(prefix="sandlot-bench-gateway-"))
    server = None
    try:
        teardown()
        veth(UP_NS, UP_HOST, f"{UP_NET}.1", UPSTREAM, 24)
        veth(POLICED_NS, BRIDGE, *POLICED, 28)
        veth(DIRECT_NS, DIRECT_HOST, *DIRECT, 28)
        # Docker's FORWARD policy drops what is not its own: let the direct client through.
        sh("iptables", "-I", "DOCKER-USER", "-i", DIRECT_HOST, "-j", "ACCEPT")
        sh("iptables", "-I", "DOCKER-USER", "-o", DIRECT_HOST, "-j", "ACCEPT")
        cert, key = certificate(state)
        server = in_ns(UP_NS, "-c", SERVER, cert, key, UPSTREAM, stdout=subprocess.PIPE,
                       text=True)
        assert server.stdout.readline().strip() == "ready"
        net = SandboxNet(id=NET_ID, subnet="10.219.0.0/28", gateway=POLICED[0],
                         upstream=f"{UPSTREAM}:53", gateway_port=15001,
                         policy=EgressPolicy(deny_all=True, domains=("bench.test",),
                                             allow_out=("bench.test",), name="bench"))
        nft.apply(net)
        folder = state / "sandboxes"
        folder.mkdir(parents=True)
        (folder / f"{NET_ID}.json").write_text(json.dumps(net.as_dict()))
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(APP_ROOT)}
        subprocess.run([sys.executable, "-m", "app.backends.docker.egress.gateway",
                        "--state-dir", str(state), "--detach", "--per-sandbox", "1200"],
                       env=env, check=True)
        deadline = time.monotonic() + 10
        while not manager.gateway_probe(net):
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.05)
        pid = int(gateway.pid_path(state).read_text())

        client(POLICED_NS, "ttfb", UPSTREAM, 20)  # warm-up both ways
        client(DIRECT_NS, "ttfb", UPSTREAM, 20)
        ttfb: dict[str, list[float]] = {"gateway": [], "direct": []}
        for _ in range(TTFB_ROUNDS // 20):  # interleaved batches
            ttfb["gateway"] += client(POLICED_NS, "ttfb", UPSTREAM, 20)
            ttfb["direct"] += client(DIRECT_NS, "ttfb", UPSTREAM, 20)
        speed, gateway_cpu = downloads(DOWNLOAD_ROUNDS, pid)
        # The same downloads over a shaped link (the upstream's side sends at LINK_MBIT),
        # as a sandbox downloads from the internet: both sides cross the same link.
        sh("ip", "netns", "exec", UP_NS, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
           "rate", f"{LINK_MBIT}mbit", "burst", "256kb", "latency", "50ms")
        linked, _ = downloads(LINK_ROUNDS, pid)
        sh("ip", "netns", "exec", UP_NS, "tc", "qdisc", "del", "dev", "eth0", "root")
        memory = []
        for level in LEVELS:
            if level == 0:
                memory.append(rss_kib(pid))
                continue
            holder = in_ns(POLICED_NS, "-c", CLIENT, "hold", UPSTREAM, str(level),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert int(holder.stdout.readline()) == level
            time.sleep(1)
            memory.append(rss_kib(pid))
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(60)
        time.sleep(3)
        memory_after = rss_kib(pid)
        rows = log_files.since(state, NET_ID, log_files.Mark(0, 0))
        per_connection = log_cost(Path(tempfile.mkdtemp(prefix="sandlot-bench-log-")))
    finally:
        if server is not None:
            server.terminate()
        try:
            os.kill(int(gateway.pid_path(state).read_text()), 15)
        except (OSError, ValueError):
            pass
        teardown()
        lock.close()
    report(ttfb, speed, linked, gateway_cpu, memory, memory_after, per_connection, len(rows))


def report(ttfb, speed, linked, gateway_cpu, memory, memory_after, per_connection,
           logged) -> None:
    g, d = statistics.median(ttfb["gateway"]), statistics.median(ttfb["direct"])
    sg, sd = statistics.median(speed["gateway"]), statistics.median(speed["direct"])
    lg, ld = statistics.median(linked["gateway"]), statistics.median(linked["direct"])
    user, system = (round(share * 100) for share in gateway_cpu)
    p95 = {k: statistics.quantiles(v, n=20)[18] for k, v in ttfb.items()}
    method = (
        "`bench/bench_egress_gateway.py`. Three network namespaces on this host: an upstream "
        "server (HTTPS with a throwaway certificate, plain HTTP, and the DNS answer for "
        "`bench.test`), a policed client whose veth is named like a sandbox bridge (our real "
        "nft rules redirect its TCP to the real gateway daemon, which reads the SNI or Host, "
        "resolves the allowed name `bench.test` through the upstream and relays untouched) "
        "and a direct client whose packets the host only forwards. TTFB is TCP connect + TLS "
        f"handshake + GET until the first response byte, a new connection each time, "
        f"{TTFB_ROUNDS} per side in interleaved batches of 20. Downloads: {DOWNLOAD_ROUNDS} "
        f"rounds of {DOWNLOAD_MB} MiB each way, alternating, then {LINK_ROUNDS} more over a "
        f"{LINK_MBIT} Mbit/s link (tc tbf on the upstream's side, so both clients share "
        "it, as sandboxes share a host's uplink). Memory is the gateway's VmRSS "
        "with that many TLS connections held open from the policed client (each through its "
        f"handshake and one request). {logged} connections went through the gateway's log "
        "in this run.")
    reading = (
        "Reading: the gateway adds a transparent proxy's work to each new connection: the "
        "redirect, the accept, reading the ClientHello (OpenSSL's own parser, stopped at the "
        "server-name callback), a cached DNS answer and a second TCP connect from the host. "
        "After the first bytes it moves data socket to socket with splice(2), so no byte "
        "passes through Python: while the unshaped downloads ran, the gateway used "
        f"{user}% of a core in Python and {system}% in the kernel. Each byte still crosses "
        "two TCP endpoints on the host where forwarding crosses none, and on these veths, "
        "with the client and the server on the same two cores, that kernel work is what "
        "bounds the unshaped ratio: the figure misses the 0.8x goal, and no change to the "
        "relay's Python can win it back; only keeping the gateway out of the data path "
        "after its decision (deciding on the first packets without ending the TCP "
        "connection) would. Across a link slower than the gateway's own ceiling, as the "
        f"{LINK_MBIT} Mbit/s row shows, the two sides are alike. Memory grows by about "
        f"{(memory[2] - memory[0]) / 1000:.0f} KiB per open connection and does not grow "
        "with a second round of as many; Python keeps the freed memory for the next "
        "connections rather than returning it.")
    lines = [
        SECTION, "",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- Machine: nproc {os.cpu_count()}, Python {sys.version.split()[0]}, Linux; load "
        f"average {LOAD_BEFORE:.2f} before the run, {os.getloadavg()[0]:.2f} after",
        f"- Method: {method}", "",
        "| What | Through the gateway | Direct | Ratio | Goal |",
        "|---|---:|---:|---:|---|",
        f"| HTTPS TTFB, median (ms) | {g:.2f} | {d:.2f} | {g / d:.2f}x | at most 1.1x |",
        f"| HTTPS TTFB, p95 (ms) | {p95['gateway']:.2f} | {p95['direct']:.2f} | "
        f"{p95['gateway'] / p95['direct']:.2f}x | |",
        f"| {DOWNLOAD_MB} MiB download, median (MB/s) | {sg:.0f} | {sd:.0f} | {sg / sd:.2f}x "
        "| at least 0.8x |",
        f"| {DOWNLOAD_MB} MiB over a {LINK_MBIT} Mbit/s link, median (MB/s) | {lg:.0f} | "
        f"{ld:.0f} | {lg / ld:.2f}x | |", "",
        "| Open connections | Gateway RSS (MiB) |", "|---:|---:|",
        *(f"| {level}{' (a second round)' if i == 3 else ''} | {kib / 1024:.1f} |"
          for i, (level, kib) in enumerate(zip(LEVELS, memory, strict=True))),
        f"| 0, 3 s after all closed | {memory_after / 1024:.1f} |", "",
        f"The egress log costs {per_connection:.1f} µs of the gateway's CPU per connection "
        "(one record serialised and added to its batch, batches of 100 appended in one "
        "write), measured over 20,000 records in-process.", "",
        reading, ""]
    body = "\n".join(lines)
    print(body)
    if not os.environ.get("BENCH_NO_DOCS"):
        write_section(DOCS, SECTION, body)


if __name__ == "__main__":
    main()
