"""The sandboxes' DNS resolver: one daemon per state directory, serving every sandbox.

    python -m app.backends.docker.egress.dns --state-dir instance/egress [--detach]

It watches `<state-dir>/sandboxes/*.json` (written by the Docker backend at create,
removed at delete) and listens on UDP and TCP port 53 of each sandbox's bridge gateway,
which is the only DNS server the sandbox's container knows. A query is answered from
the policy of the sandbox whose gateway received it; how, see dns_answer.py.

Fail closed: a sandbox whose resolver is down resolves nothing. Only one daemon runs
per state directory (it holds `resolver.lock`); it exits after IDLE_EXIT_SEC without
sandboxes, and the backend starts it again when it needs it.
"""

from __future__ import annotations

import argparse
import fcntl
import ipaddress
import json
import logging
import logging.handlers
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from app.backends.docker.egress import dns_limits, log_files
from app.backends.docker.egress.dns_answer import answer, read_exact
from app.backends.docker.egress.dns_limits import Share
from app.backends.docker.egress.policy import SandboxNet

# A full rescan catches what no wake-up announced (a bridge gone, a missed signal); a new
# sandbox is announced by SIGUSR1 from the backend and served at once.
RESCAN_SEC = 2.0
TCP_TOTAL = 256  # TCP connections open at once, over all sandboxes
IDLE_EXIT_SEC = 300
WORKERS = 32

log = logging.getLogger("sandlot.egress.dns")


def sandboxes_dir(state_dir: Path) -> Path:
    return state_dir / "sandboxes"


def lock_path(state_dir: Path) -> Path:
    return state_dir / "resolver.lock"


def pid_path(state_dir: Path) -> Path:
    return state_dir / "resolver.pid"


def wake_path(state_dir: Path) -> Path:
    """Holds the pid of a resolver that takes SIGUSR1 as "rescan now"."""
    return state_dir / "resolver.wake"


def log_path(state_dir: Path) -> Path:
    return state_dir / "resolver.log"


def read_state(net_id: str, path: Path) -> SandboxNet | None:
    """A sandbox's state file (the resolver's and the gateway's view of it); None when
    it is unreadable or names another sandbox."""
    try:
        net = SandboxNet.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("skipping %s: %s", path.name, exc)
        return None
    return net if net.id == net_id else None


class StateFiles:
    """The state directory as a daemon follows it: a sandbox's file is read when it
    appears and again when it is replaced (a policy applied to running sandboxes, written
    atomically as at creation), and forgotten when it goes."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.nets: dict[str, SandboxNet | None] = {}  # None: unreadable
        self._stamps: dict[str, tuple[int, int]] = {}

    def refresh(self) -> tuple[list[str], list[str]]:
        """Follow the directory; (the ids gone, the ids whose file was replaced)."""
        present: dict[str, tuple[Path, tuple[int, int]]] = {}
        for path in sandboxes_dir(self.state_dir).glob("*.json"):
            try:
                info = path.stat()
            except FileNotFoundError:
                continue
            present[path.stem] = (path, (info.st_ino, info.st_mtime_ns))
        gone = [net_id for net_id in self.nets if net_id not in present]
        for net_id in gone:
            del self.nets[net_id], self._stamps[net_id]
        replaced = []
        for net_id, (path, stamp) in present.items():
            if self._stamps.get(net_id) != stamp:
                if net_id in self.nets:
                    replaced.append(net_id)
                self.nets[net_id], self._stamps[net_id] = read_state(net_id, path), stamp
        return gone, replaced


# -- serving -----------------------------------------------------------------------------

def _bridge_exists(net: SandboxNet) -> bool:
    return os.path.exists(f"/sys/class/net/{net.bridge}")


@dataclass
class Served:
    net: SandboxNet
    udp: socket.socket
    tcp: socket.socket

    def __post_init__(self) -> None:
        self.subnet = ipaddress.IPv4Network(self.net.subnet)
        self.share = Share()

    def from_sandbox(self, peer: tuple[str, int]) -> bool:
        """Only the sandbox's own subnet is served, and loopback (the backend's probe:
        other host addresses would be masqueraded by Docker's rule for the subnet)."""
        try:
            address = ipaddress.IPv4Address(peer[0])
        except ValueError:
            return False
        return address in self.subnet or address.is_loopback

    def close(self) -> None:
        self.udp.close()
        self.tcp.close()


class Resolver:
    """Listens on the gateway of every sandbox named in the state directory whose bridge
    exists: a state file left behind by a network removed elsewhere must not hold the
    address's port 53 when a later network reuses the subnet."""

    def __init__(self, state_dir: Path, idle_exit_sec: float = IDLE_EXIT_SEC):
        self.state_dir = state_dir
        self.idle_exit_sec = idle_exit_sec
        self.states = StateFiles(state_dir)
        self.served: dict[str, Served] = {}
        self.failing: set[str] = set()  # warned once about a failed bind
        self.selector = selectors.DefaultSelector()
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="dns")
        self.stopping = threading.Event()
        # Connections have their own threads, bounded per sandbox and in all, so an idle
        # one never holds a worker that UDP queries of other sandboxes need.
        self.tcp_slots = threading.BoundedSemaphore(TCP_TOTAL)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, (None, "wake"))

    def rescan(self) -> None:
        """Follow the state files (written atomically; replaced when a policy is applied
        to running sandboxes; removed at delete) and the bridges they name."""
        gone, replaced = self.states.refresh()
        self.failing.difference_update(gone)
        known = self.states.nets
        for net_id in replaced:
            if net_id in self.served and known[net_id] is not None:
                self.served[net_id].net = known[net_id]  # the next query decides by it
        for net_id in list(self.served):
            net = known.get(net_id)
            if net is None or not _bridge_exists(net):
                self._stop(net_id)
        for net_id, net in known.items():
            if net is not None and net_id not in self.served and _bridge_exists(net):
                self._serve(net)

    def _stop(self, net_id: str) -> None:
        served = self.served.pop(net_id)
        self.selector.unregister(served.udp)
        self.selector.unregister(served.tcp)
        served.close()
        log.info("sandbox %s: stopped serving %s", net_id, served.net.gateway)

    def _serve(self, net: SandboxNet) -> None:
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            udp.bind((net.gateway, 53))
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((net.gateway, 53))
            tcp.listen(64)
        except OSError as exc:  # next rescan tries again
            udp.close()
            tcp.close()
            if net.id not in self.failing:
                self.failing.add(net.id)
                log.warning("sandbox %s: cannot listen on %s:53: %s", net.id, net.gateway, exc)
            return
        self.failing.discard(net.id)
        udp.setblocking(False)
        tcp.setblocking(False)
        served = Served(net, udp, tcp)
        self.selector.register(udp, selectors.EVENT_READ, (served, "udp"))
        self.selector.register(tcp, selectors.EVENT_READ, (served, "tcp"))
        self.served[net.id] = served
        log.info("sandbox %s: serving on %s:53 (upstream %s, %s)", net.id, net.gateway,
                 net.upstream, "deny by default" if net.policy.deny_all else "open by default")

    def run(self) -> None:
        idle_since = time.monotonic()
        next_scan = 0.0
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= next_scan:
                self.rescan()
                next_scan = now + RESCAN_SEC
                if self.served:
                    idle_since = now
                elif now - idle_since >= self.idle_exit_sec:
                    log.info("no sandboxes for %ss: exiting", int(self.idle_exit_sec))
                    break
            for key, _ in self.selector.select(timeout=RESCAN_SEC):
                served, kind = key.data
                try:
                    if kind == "wake":
                        self._drain_wake()
                        next_scan = 0.0  # a sandbox was announced: serve it now
                    elif kind == "udp":
                        data, peer = served.udp.recvfrom(65535)
                        if served.share.admit_query():
                            self.pool.submit(self._udp, served, data, peer)
                    else:
                        self._accept(served)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    log.warning("sandbox %s: %s receive failed: %s", served.net.id, kind, exc)
        self.close()

    def wake(self) -> None:
        """Rescan now (signal-safe: SIGUSR1 calls this)."""
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass  # already pending

    def _drain_wake(self) -> None:
        try:
            while self.wake_r.recv(512):
                pass
        except OSError:
            pass

    def _accept(self, served: Served) -> None:
        conn, _ = served.tcp.accept()
        if not served.share.admit_connection():
            conn.close()  # over this sandbox's share: turned away at once
            return
        if not self.tcp_slots.acquire(blocking=False):
            served.share.closed()
            conn.close()
            return
        thread = threading.Thread(target=self._tcp_thread, args=(served, conn),
                                  name="dns-tcp", daemon=True)
        thread.start()

    def _tcp_thread(self, served: Served, conn: socket.socket) -> None:
        try:
            self._tcp(served, conn)
        finally:
            served.share.closed()
            self.tcp_slots.release()

    def close(self) -> None:
        for served in self.served.values():
            served.close()
        self.served.clear()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.wake_r.close()
        self.wake_w.close()

    def refused(self, net: SandboxNet, name: str) -> None:
        """A name refused by policy: a line of the sandbox's egress log (written at once,
        so the command that asked lists it)."""
        record = {"t": round(time.time(), 3), "meta": net.metadata, "protocol": "dns",
                  "host": name, "address": None, "port": 53, "verdict": "denied",
                  "rule": "default deny", "sent": 0, "received": 0, "ms": 0}
        try:
            log_files.append(self.state_dir, net.id, [json.dumps(record, sort_keys=True)])
        except OSError as exc:
            log.warning("sandbox %s: egress log not written: %s", net.id, exc)

    def _udp(self, served: Served, data: bytes, peer: tuple[str, int]) -> None:
        try:
            reply = answer(served.net, data, self.refused) if served.from_sandbox(peer) \
                else None
            if reply is not None:
                served.udp.sendto(reply, peer)
        except Exception:  # noqa: BLE001 - one bad query must not stop the resolver
            log.exception("sandbox %s: query from %s failed", served.net.id, peer[0])
        finally:
            served.share.done_query()

    def _tcp(self, served: Served, conn: socket.socket) -> None:
        with conn:
            try:
                if not served.from_sandbox(conn.getpeername()):
                    return
                conn.setblocking(True)
                conn.settimeout(dns_limits.TCP_IDLE_SEC)
                ends = time.monotonic() + dns_limits.TCP_LIFETIME_SEC
                for _ in range(100):
                    header = conn.recv(2, socket.MSG_WAITALL)
                    if len(header) < 2 or time.monotonic() > ends:
                        return
                    data = read_exact(conn, struct.unpack("!H", header)[0])
                    if not served.share.admit_query():
                        return  # over its share: the client retries, maybe over UDP
                    try:
                        reply = answer(served.net, data, self.refused)
                    finally:
                        served.share.done_query()
                    if reply is None:
                        return
                    conn.sendall(struct.pack("!H", len(reply)) + reply)
            except (OSError, ValueError):
                return
            except Exception:  # noqa: BLE001
                log.exception("sandbox %s: tcp query failed", served.net.id)


# -- the daemon --------------------------------------------------------------------------

def configure_logging(path: Path) -> None:
    """A daemon's log: rotated at 1 MiB, two old files kept."""
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=1 << 20,
                                                   backupCount=2)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def _detach() -> None:
    """Double fork: the caller's child exits at once, the daemon is adopted by init."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--detach", action="store_true", help="run in the background")
    parser.add_argument("--idle-exit", type=float, default=IDLE_EXIT_SEC,
                        help="exit after this many seconds without sandboxes")
    args = parser.parse_args(argv)
    # Everything the resolver writes (log and its rotations, pid, lock) is for root's eyes:
    # the log names the hosts each sandbox looked up.
    os.umask(0o077)
    state_dir = args.state_dir.resolve()
    sandboxes_dir(state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    if args.detach:
        _detach()
    lock = open(lock_path(state_dir), "a+")  # noqa: SIM115 - held for the process lifetime
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another resolver serves this state directory
    configure_logging(log_path(state_dir))
    pid_path(state_dir).write_text(f"{os.getpid()}\n")
    # This resolver rescans on SIGUSR1 (one from before would exit on it).
    wake_path(state_dir).write_text(f"{os.getpid()}\n")
    resolver = Resolver(state_dir, args.idle_exit)
    signal.signal(signal.SIGTERM, lambda *_: resolver.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: resolver.stopping.set())
    signal.signal(signal.SIGUSR1, lambda *_: resolver.wake())
    log.info("resolver started (pid %s, state %s)", os.getpid(), state_dir)
    try:
        resolver.run()
    finally:
        pid_path(state_dir).unlink(missing_ok=True)
        wake_path(state_dir).unlink(missing_ok=True)
        log.info("resolver stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
