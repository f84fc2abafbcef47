"""The egress gateway: every TCP connection out of a policed Docker sandbox, decided by
the name it presents and relayed by us (issue 24).

    python -m app.backends.docker.egress.gateway --state-dir instance/egress [--detach]

nftables redirects each new TCP connection from a sandbox's bridge (but to the host
itself) to this process, on the sandbox's gateway address (nft.py). Per connection:

1. the sandbox is the one whose subnet holds the source address (state files, as the
   resolver reads them); the destination it asked for comes from conntrack
   (SO_ORIGINAL_DST);
2. the first bytes give the name: the TLS ClientHello's SNI or the HTTP Host (sniff.py);
3. decide.py decides: an allowed name is resolved by us, through the sandbox's DNS
   upstream, and we connect to that answer, never to the address the sandbox chose (so
   an allowed name cannot carry the connection elsewhere); a connection without a name
   (other TCP, or HTTP/1.0 without Host) is decided by its address, as the firewall did;
4. allowed: the bytes are relayed untouched both ways (TLS is not intercepted); denied:
   a plain HTTP request gets a 403 whose text names the config, the host and the rule,
   anything else a reset.

Each connection becomes one line of the sandbox's egress log (`<state>/egress-log/
<id>.jsonl`: time, name, address, port, protocol, verdict, rule, bytes each way,
duration), which the app reads. Bounded: connections per sandbox and in all, an idle
timeout, a connect timeout, a fixed relay buffer. Fail closed: while the gateway is
down, redirected connections are refused. One gateway per state directory
(`gateway.lock`); it exits after IDLE_EXIT_SEC without sandboxes, and the backend
starts it again when it needs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import ipaddress
import json
import logging
import logging.handlers
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.backends.docker.egress import decide, dns_answer, nft
from app.backends.docker.egress.dns import StateFiles, sandboxes_dir
from app.backends.docker.egress.log_files import Spool
from app.backends.docker.egress.policy import SandboxNet
from app.backends.docker.egress.sniff import HEAD_MAX, sniff

SO_ORIGINAL_DST = 80
SO_MARK = 36
PROBE_REPLY = b"sandlot-gateway %s\n"
RESCAN_SEC = 2.0
IDLE_EXIT_SEC = 300
PER_SANDBOX = 256  # connections open at once from one sandbox
TOTAL = 4096  # and over all sandboxes
SNIFF_SEC = 3.0  # more, when only a name could allow the connection
SNIFF_SHORT_SEC = 0.5  # first bytes of any connection (a server-first protocol waits this)
CONNECT_SEC = 10.0
IDLE_SEC = 600.0  # a connection with no byte either way for this long is closed
BUFFER = 65536
SPLICE_CHUNK = 1 << 20  # per splice(2), and the relay pipes' size
SPLICE_F_MOVE, SPLICE_F_NONBLOCK = 1, 2
F_SETPIPE_SZ = 1031
ANSWER_CACHE_MAX = 1024
LEARNED_FRESH_SEC = 1.0  # an address found in the learned set counts this long
LOG_FLUSH_SEC = 0.5

log = logging.getLogger("sandlot.egress.gateway")


def lock_path(state_dir: Path) -> Path:
    return state_dir / "gateway.lock"


def pid_path(state_dir: Path) -> Path:
    return state_dir / "gateway.pid"


def log_path(state_dir: Path) -> Path:
    return state_dir / "gateway.log"


def denial_text(net: SandboxNet, decision: decide.Decision) -> str:
    """The body a denied plain-HTTP request gets: short, for a person or an agent."""
    whose = f"of '{net.policy.name}'" if net.policy.name else "of this sandbox"
    return (f"denied by Sandlot egress policy {whose}: {decision.reason} "
            f"(rule: {decision.rule}); ask an admin\n")


# -- serving -----------------------------------------------------------------------------

@dataclass
class Served:
    net: SandboxNet
    server: asyncio.base_events.Server
    open: int = 0
    subnet: ipaddress.IPv4Network = field(init=False)

    def __post_init__(self) -> None:
        self.subnet = ipaddress.IPv4Network(self.net.subnet)


class Relay:
    """One relayed connection's two directions: bytes each way, last activity, done."""

    def __init__(self) -> None:
        self.counts = [0, 0]  # from the sandbox, to it
        self.last = time.monotonic()
        self.closed = 0
        self.finished = asyncio.Event()

    def side_done(self) -> None:
        self.closed += 1
        if self.closed >= 2:
            self.finished.set()


class Splice:
    """One direction of a relay, moved by the kernel: splice(2) from the source socket
    into a pipe and from the pipe into the target socket, never through Python's memory.
    Non-blocking on the event loop: while the target cannot take more, the source is not
    read (its sender slows down, as TCP does)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, source, target, relay: Relay,
                 slot: int):
        """`source`, `target`: sockets (or asyncio's wrappers of them)."""
        self.loop, self.source, self.target = loop, source.fileno(), target.fileno()
        self.target_socket = target
        self.relay, self.slot = relay, slot
        self.read_end, self.write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self.write_end, F_SETPIPE_SZ, SPLICE_CHUNK)
        self.queued = 0  # bytes in the pipe, not yet in the target
        self.eof = False
        self.done = False

    def start(self) -> None:
        self.loop.add_reader(self.source, self._readable)

    def _readable(self) -> None:
        try:
            moved = os.splice(self.source, self.write_end, SPLICE_CHUNK,
                              flags=SPLICE_F_MOVE | SPLICE_F_NONBLOCK)
        except BlockingIOError:
            return
        except OSError:
            self._finish(failed=True)
            return
        if moved == 0:
            self.eof = True
            self.loop.remove_reader(self.source)
        else:
            self.relay.counts[self.slot] += moved
            self.relay.last = time.monotonic()
            self.queued += moved
        self._flush()

    def _flush(self) -> None:
        while self.queued:
            try:
                moved = os.splice(self.read_end, self.target, self.queued,
                                  flags=SPLICE_F_MOVE | SPLICE_F_NONBLOCK)
            except BlockingIOError:  # the target is full: wait for it, read no more
                self.loop.remove_reader(self.source)
                self.loop.add_writer(self.target, self._writable)
                return
            except OSError:
                self._finish(failed=True)
                return
            self.queued -= moved
        if self.eof:  # all passed on: pass the end on too (the other way may go on)
            with contextlib.suppress(OSError):
                self.target_socket.shutdown(socket.SHUT_WR)
            self._finish()

    def _writable(self) -> None:
        self.loop.remove_writer(self.target)
        self._flush()
        if not self.queued and not self.eof and not self.done:
            self.loop.add_reader(self.source, self._readable)

    def _finish(self, failed: bool = False) -> None:
        if not self.done:
            self.done = True
            self.relay.side_done()
        if failed:
            self.relay.finished.set()

    def close(self) -> None:
        self.loop.remove_reader(self.source)
        self.loop.remove_writer(self.target)
        for fd in (self.read_end, self.write_end):
            with contextlib.suppress(OSError):
                os.close(fd)


def _original_destination(sock: socket.socket) -> tuple[str, int]:
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack_from("!H", raw, 2)[0]
    return socket.inet_ntoa(raw[4:8]), port


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset: the sandbox's client fails at once instead of waiting."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _local_addresses() -> set[str]:
    """This host's IPv4 addresses: never an upstream (nft does not redirect traffic for
    them; an answer naming one is refused here)."""
    try:
        done = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True,
                              timeout=5, check=False)
        found = {info["local"] for link in json.loads(done.stdout or "[]")
                 for info in link.get("addr_info") or () if info.get("local")}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        found = set()
    return found


class Gateway:
    def __init__(self, state_dir: Path, idle_exit_sec: float = IDLE_EXIT_SEC,
                 mark: int | None = None, per_sandbox: int = PER_SANDBOX,
                 total: int = TOTAL):
        self.state_dir = state_dir
        self.idle_exit_sec = idle_exit_sec
        self.mark = mark
        self.per_sandbox = per_sandbox
        self.total_max = total
        self.total = 0
        self.states = StateFiles(state_dir)
        self.served: dict[str, Served] = {}
        self.failing: set[str] = set()
        self.spool = Spool(state_dir)
        self.local = _local_addresses()
        self.answers: dict[tuple[str, str], tuple[float, list[str]]] = {}
        self.learned: dict[str, tuple[float, frozenset[str]]] = {}
        self.stopping = asyncio.Event()
        self.woken = asyncio.Event()

    # -- state files -----------------------------------------------------------------

    async def rescan(self) -> None:
        gone, replaced = self.states.refresh()
        self.failing.difference_update(gone)
        known = self.states.nets
        for net_id in replaced:
            if net_id in self.served and known[net_id] is not None:
                self.served[net_id].net = known[net_id]  # new connections decide by it
        for net_id in list(self.served):
            net = known.get(net_id)
            if net is None or not os.path.exists(f"/sys/class/net/{net.bridge}"):
                served = self.served.pop(net_id)
                served.server.close()
                log.info("sandbox %s: stopped serving", net_id)
        for net_id, net in known.items():
            if (net is not None and net.gateway_port and net_id not in self.served
                    and os.path.exists(f"/sys/class/net/{net.bridge}")):
                await self._serve(net)
        self.local = _local_addresses()

    async def _serve(self, net: SandboxNet) -> None:
        served: Served | None = None

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            assert served is not None
            await self.connection(served, reader, writer)

        try:
            server = await asyncio.start_server(handle, net.gateway, net.gateway_port,
                                                reuse_address=True, backlog=256,
                                                limit=BUFFER)
        except OSError as exc:
            if net.id not in self.failing:
                self.failing.add(net.id)
                log.warning("sandbox %s: cannot listen on %s:%s: %s", net.id, net.gateway,
                            net.gateway_port, exc)
            return
        self.failing.discard(net.id)
        served = Served(net, server)
        self.served[net.id] = served
        log.info("sandbox %s: gateway on %s:%s", net.id, net.gateway, net.gateway_port)

    # -- one connection --------------------------------------------------------------

    async def connection(self, served: Served, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        net = served.net
        peer = writer.get_extra_info("peername")[0]
        address = ipaddress.IPv4Address(peer)
        if address.is_loopback or peer == net.gateway:  # the backend's readiness probe
            writer.write(PROBE_REPLY % net.id.encode())
            with contextlib.suppress(OSError):
                await writer.drain()
            writer.close()
            return
        if address not in served.subnet:
            _reset(writer)
            return
        if served.open >= self.per_sandbox or self.total >= self.total_max:
            log.warning("sandbox %s: connection limit reached (%d here, %d in all)", net.id,
                        served.open, self.total)
            self.spool.add(net.id, {"t": time.time(), "verdict": "denied", "meta": net.metadata,
                                    "rule": "built-in: connection limit", "protocol": "tcp"})
            _reset(writer)
            return
        served.open += 1
        self.total += 1
        try:
            await self._relay(net, reader, writer)
        except Exception:  # noqa: BLE001 - one connection must not stop the gateway
            log.exception("sandbox %s: connection failed", net.id)
            _reset(writer)
        finally:
            served.open -= 1
            self.total -= 1

    async def _first_bytes(self, reader: asyncio.StreamReader,
                           wait: float) -> tuple[bytes, tuple[str, str | None]]:
        data = b""
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, sniff(data) or ("tcp", None)
            try:
                chunk = await asyncio.wait_for(reader.read(HEAD_MAX - len(data)), left)
            except (TimeoutError, OSError):
                chunk = b""
                deadline = 0
            if not chunk:
                return data, sniff(data) or ("tcp", None)
            data += chunk
            found = sniff(data)
            if found is not None:
                return data, found

    async def _relay(self, net: SandboxNet, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        started = time.time()
        ip, port = _original_destination(writer.get_extra_info("socket"))
        policy = net.policy
        by_address = decide.by_address(policy, ip, learned=False)
        explicit = by_address.allowed and by_address.rule.startswith("allow_out")
        # The first bytes, briefly: a client that speaks first has sent them by then.
        first, (protocol, name) = await self._first_bytes(reader, SNIFF_SHORT_SEC)
        learned = False
        if name is None and not by_address.allowed and \
                not by_address.rule.startswith("built-in"):
            # No name (yet): an address learned from a DNS answer for an allowed name
            # passes, as in the firewall; otherwise, where a name could allow what the
            # address does not, wait longer for one.
            learned = await self._learned(net.id, ip)
            if not learned and not first and policy.domains:
                first, (protocol, name) = await self._first_bytes(reader, SNIFF_SEC)
        record = {"t": round(started, 3), "host": name, "port": port, "protocol": protocol,
                  "meta": net.metadata}
        target: str | None = ip
        if name is not None:
            decision = decide.by_name(policy, name)
            if decision is not None and decision.allowed:
                target, why = await self._answer(net, name, ip)
                if target is None:
                    decision = decide.Decision(False, decision.rule, why)
            elif explicit:
                decision = by_address
            elif decision is None:  # open by default: the address decides
                decision = by_address
        else:
            decision = decide.by_address(policy, ip, learned=learned)
        if decision.allowed and target in self.local:
            decision = decide.Decision(False, "built-in: this host",
                                       "the sandbox host itself is never reachable")
        record.update(address=target if decision.allowed else ip, verdict=(
            "allowed" if decision.allowed else "denied"), rule=decision.rule)
        if not decision.allowed or target is None:
            record.update(sent=len(first), received=0, ms=0)
            self.spool.add(net.id, record)
            self.spool.flush()  # on disk before the sandbox learns of it: its command's
            self._deny(net, writer, protocol, name or ip, decision)  # result lists it
            return
        upstream = await self._connect(target, port)
        if isinstance(upstream, str):
            record.update(verdict="failed", rule=decision.rule, sent=0, received=0,
                          ms=round((time.time() - started) * 1000), error=upstream)
            self.spool.add(net.id, record)
            _reset(writer)
            return
        sent, received = await self._pipe(reader, writer, upstream, first)
        record.update(sent=sent, received=received, ms=round((time.time() - started) * 1000))
        self.spool.add(net.id, record)

    async def _learned(self, net_id: str, ip: str) -> bool:
        """Is `ip` in the sandbox's DNS-learned set (asked only for connections that
        present no name)? A hit counts for LEARNED_FRESH_SEC; a miss reads nft again,
        since the resolver may have learned it a moment ago."""
        read_at, found = self.learned.get(net_id, (0.0, frozenset()))
        if ip in found and time.monotonic() - read_at < LEARNED_FRESH_SEC:
            return True
        found = frozenset(await asyncio.to_thread(nft.learned, net_id))
        self.learned[net_id] = (time.monotonic(), found)
        return ip in found

    def _deny(self, net: SandboxNet, writer: asyncio.StreamWriter, protocol: str,
              host: str, decision: decide.Decision) -> None:
        log.info("sandbox %s: %s %s denied (%s)", net.id, protocol, host, decision.rule)
        if protocol != "http":
            _reset(writer)
            return
        body = denial_text(net, decision).encode()
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     b"Connection: close\r\nX-Sandlot-Egress: denied\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        writer.close()

    async def _answer(self, net: SandboxNet, name: str, asked: str) -> tuple[str | None, str]:
        """The address to connect to for an allowed name: the one the sandbox asked for
        when it is among our answers, else our first usable answer."""
        key = (net.upstream or "", name)
        cached = self.answers.get(key)
        if cached and cached[0] > time.monotonic():
            found = cached[1]
        else:
            found = await asyncio.to_thread(dns_answer.addresses, net.upstream, name) or []
            if len(self.answers) >= ANSWER_CACHE_MAX:
                self.answers.clear()
            self.answers[key] = (time.monotonic() + dns_answer.MIN_TTL, found)
        usable = [a for a in found if decide.usable_answer(net.policy, a)
                  and a not in self.local]
        if not usable:
            return None, (f"{name} has no address a name may open now" if found
                          else f"{name} does not resolve now")
        return (asked if asked in usable else usable[0]), ""

    async def _connect(self, ip: str, port: int) -> socket.socket | str:
        """A connected upstream socket, or why there is none."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if self.mark:
                sock.setsockopt(socket.SOL_SOCKET, SO_MARK, self.mark)
            sock.setblocking(False)
            await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (ip, port)),
                                   CONNECT_SEC)
            return sock
        except (OSError, TimeoutError) as exc:
            sock.close()
            return "timed out" if isinstance(exc, TimeoutError) else (
                exc.strerror or type(exc).__name__)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    upstream: socket.socket, first: bytes) -> tuple[int, int]:
        """Relay until both directions are done (or idle for IDLE_SEC). The first bytes
        (and whatever the stream read past them) are sent as they came; the rest goes
        socket to socket through the kernel (Splice). The client's transport stops
        reading first, so the event loop watches its socket for us alone."""
        loop = asyncio.get_running_loop()
        client = writer.transport
        client.pause_reading()
        # What the stream read past the first bytes (a client that sent more at once).
        head = first + bytes(reader._buffer)  # noqa: SLF001 - no public way to take it whole
        reader._buffer.clear()  # noqa: SLF001
        # A second descriptor of the client's socket: asyncio lets a transport's own be
        # watched by the transport alone.
        client_socket = socket.socket(fileno=os.dup(writer.get_extra_info("socket").fileno()))
        relay = Relay()
        relay.counts[0] = len(head)
        try:
            if head:
                await asyncio.wait_for(loop.sock_sendall(upstream, head), CONNECT_SEC)
        except (OSError, TimeoutError):
            upstream.close()
            client_socket.close()
            client.close()
            return relay.counts[0], 0
        directions = (Splice(loop, client_socket, upstream, relay, 0),
                      Splice(loop, upstream, client_socket, relay, 1))
        for direction in directions:
            direction.start()
        try:
            while not relay.finished.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(relay.finished.wait(), IDLE_SEC)
                if time.monotonic() - relay.last >= IDLE_SEC:
                    break
        finally:
            for direction in directions:
                direction.close()
            upstream.close()
            client_socket.close()
            client.close()
        return relay.counts[0], relay.counts[1]

    # -- the loop --------------------------------------------------------------------

    async def run(self) -> None:
        idle_since = time.monotonic()
        next_flush = 0.0
        while not self.stopping.is_set():
            await self.rescan()
            now = time.monotonic()
            if self.served or self.total:
                idle_since = now
            elif now - idle_since >= self.idle_exit_sec:
                log.info("no sandboxes for %ss: exiting", int(self.idle_exit_sec))
                break
            deadline = now + RESCAN_SEC
            while time.monotonic() < deadline and not self.stopping.is_set():
                if time.monotonic() >= next_flush:
                    self.spool.flush()
                    next_flush = time.monotonic() + LOG_FLUSH_SEC
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.woken.wait(), LOG_FLUSH_SEC)
                if self.woken.is_set():
                    self.woken.clear()
                    break
        for served in self.served.values():
            served.server.close()
        self.spool.flush()


# -- the daemon --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    from app.backends.docker.egress.dns import _detach, configure_logging

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--detach", action="store_true", help="run in the background")
    parser.add_argument("--idle-exit", type=float, default=IDLE_EXIT_SEC)
    parser.add_argument("--mark", type=lambda v: int(v, 0), default=None,
                        help="firewall mark (SO_MARK) for upstream connections")
    parser.add_argument("--per-sandbox", type=int, default=PER_SANDBOX)
    parser.add_argument("--total", type=int, default=TOTAL)
    args = parser.parse_args(argv)
    os.umask(0o077)  # the log names the hosts each sandbox reached: root's eyes only
    state_dir = args.state_dir.resolve()
    sandboxes_dir(state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    if args.detach:
        _detach()
    lock = open(lock_path(state_dir), "a+")  # noqa: SIM115 - held for the process lifetime
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another gateway serves this state directory
    configure_logging(log_path(state_dir))
    pid_path(state_dir).write_text(f"{os.getpid()}\n")

    async def serve() -> None:
        gateway = Gateway(state_dir, args.idle_exit, args.mark, args.per_sandbox, args.total)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, gateway.stopping.set)
        loop.add_signal_handler(signal.SIGINT, gateway.stopping.set)
        loop.add_signal_handler(signal.SIGUSR1, gateway.woken.set)
        await gateway.run()

    log.info("gateway started (pid %s, state %s)", os.getpid(), state_dir)
    try:
        asyncio.run(serve())
    finally:
        pid_path(state_dir).unlink(missing_ok=True)
        log.info("gateway stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
