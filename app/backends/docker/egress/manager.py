"""Per-sandbox egress lifecycle, as the Docker backend uses it.

`attach` (at create): a Docker bridge network `sandlot-<id>` (bridge `sl-<id>`, a /28
from the pool, labelled with the sandbox metadata), then the nft rules, then the state
file, then the resolver serving it. `release` (at delete): the network, the rules,
the file, in that order, so the rules outlive anything still attached.
`ensure` (at resume): rules rebuilt from the state file if the host lost them (a
reboot), resolver running. `cleanup_orphans`: whatever has no container any more.

Settings (state directory, DNS upstream, subnet pool): settings.py.
"""

from __future__ import annotations

import dataclasses
import fcntl
import ipaddress
import json
import logging
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from dnslib import RCODE, DNSRecord

from app.backends.base import BackendError, ResolvedNetworkPolicy, SandboxHeldElsewhere
from app.backends.docker.egress import dns, gateway, log_files, nft
from app.backends.docker.egress.dns_answer import PROBE_SUFFIX
from app.backends.docker.egress.policy import EGRESS_ID, EgressPolicy, SandboxNet
from app.backends.docker.egress.settings import ROOT, SUBNET_PREFIX, EgressSettings
from app.security.files import open_private, write_private

LABEL = "sandlot.egress"  # on our networks: the egress id
CREATED_LABEL = "sandlot.egress.created"  # epoch seconds, for the orphan grace period
NETWORK_PREFIX = "sandlot-"
READY_TIMEOUT_SEC = 10
ORPHAN_GRACE_SEC = 120

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attachment:
    """How a new container joins the network: `network` is its network mode."""

    network: str
    dns: tuple[str, ...] = ()
    egress_id: str | None = None


NO_NETWORK = Attachment("none")
DEFAULT_BRIDGE = Attachment("bridge")


def host_supports() -> bool:
    """Cheap check (no subprocess): root and nft installed."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and nft.NFT is not None


def egress_id_of(container: dict[str, Any]) -> str | None:
    """The egress id of an inspected container on one of our networks."""
    mode = (container.get("HostConfig") or {}).get("NetworkMode") or ""
    net_id = mode[len(NETWORK_PREFIX):] if mode.startswith(NETWORK_PREFIX) else ""
    return net_id if EGRESS_ID.match(net_id) else None


class Daemons:
    """This host's egress daemons (the resolver and the gateway) and the sandbox state
    files they serve from: what the reaper and the sandbox check need, without an engine."""

    def __init__(self, settings: EgressSettings | None = None):
        self.settings = settings or EgressSettings.from_env()

    def policed(self) -> list[SandboxNet]:
        """The sandboxes of this host whose egress the daemons decide now: a state file
        whose bridge exists."""
        return [net for net in _states(self.settings.state_dir)
                if Path(f"/sys/class/net/{net.bridge}").exists()]

    def supervise(self) -> list[str]:
        """The daemons' supervisor (the reaper runs it): while any sandbox of this host is
        policed, a resolver or gateway that is not running (killed, crashed) is started
        again, so a sandbox's egress comes back without waiting for its next command.
        Answers what it started."""
        nets = self.policed()
        started = []
        if nets and not self.resolver_running():
            self._ensure_resolver(nets[0])
            started.append("resolver")
        served = [net for net in nets if net.gateway_port]
        if served and not self.gateway_running():
            self._ensure_gateway(served[0])
            started.append("gateway")
        return started

    # -- state files and the resolver ----------------------------------------------------

    def _state_file(self, net_id: str) -> Path:
        return dns.sandboxes_dir(self.settings.state_dir) / f"{net_id}.json"

    def _write_state(self, net: SandboxNet) -> None:
        folder = dns.sandboxes_dir(self.settings.state_dir)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = folder / f".{net.id}.tmp"
        write_private(temp, json.dumps(net.as_dict(), indent=1, sort_keys=True))
        temp.replace(self._state_file(net.id))  # the resolver never sees half a file

    def resolver_running(self) -> bool:
        return resolver_running(self.settings.state_dir)

    def _ensure_resolver(self, net: SandboxNet) -> None:
        """Start the resolver if it is not running, tell it about `net` (it rescans at
        once on SIGUSR1) and wait until it answers for `net`: a refused probe (nothing
        bound yet) comes back at once, so readiness costs milliseconds, not a sleep."""
        self._wake_resolver()
        _until_ready(lambda: probe(net), self.resolver_running, self._spawn_resolver,
                     f"the sandbox DNS resolver does not answer on {net.gateway}:53; see "
                     f"{dns.log_path(self.settings.state_dir)}")

    def _wake_resolver(self) -> None:
        """SIGUSR1 to the running resolver, which then serves new sandboxes at once."""
        state_dir = self.settings.state_dir
        try:  # both files name it: a resolver from before SIGUSR1 meant "rescan" would exit
            pid = int(dns.pid_path(state_dir).read_text())
            if int(dns.wake_path(state_dir).read_text()) != pid:
                return
        except (OSError, ValueError):
            return
        if pid > 1 and self.resolver_running():
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass

    def _spawn_resolver(self) -> None:
        self._spawn("app.backends.docker.egress.dns", dns.log_path(self.settings.state_dir))

    def _spawn(self, module: str, log_file: Path, *extra: str) -> None:
        """Start one of our daemons (it detaches itself), its output in its own 0600 log.
        A long-lived process: give it no more of our environment (secrets) than it needs."""
        state_dir = self.settings.state_dir
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = {"PATH": os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin",
               "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"}
        with open_private(log_file) as output:
            subprocess.run([sys.executable, "-m", module, "--state-dir", str(state_dir),
                            "--detach", *extra], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                           stdout=output, stderr=output, timeout=30, check=False)

    def gateway_running(self) -> bool:
        return holds_lock(gateway.lock_path(self.settings.state_dir))

    def _ensure_gateway(self, net: SandboxNet) -> None:
        """As for the resolver: start the gateway if it is not running, wake it (it
        rescans on SIGUSR1) and wait until it answers on this sandbox's gateway address.
        A sandbox from before the gateway (no port in its state) has none."""
        if not net.gateway_port:
            return
        self._signal(gateway.pid_path(self.settings.state_dir), self.gateway_running())
        _until_ready(lambda: gateway_probe(net), self.gateway_running, self._spawn_gateway,
                     f"the sandbox egress gateway does not answer on {net.gateway}:"
                     f"{net.gateway_port}; see {gateway.log_path(self.settings.state_dir)}")

    @staticmethod
    def _signal(pid_file: Path, running: bool) -> None:
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            return
        if pid > 1 and running:
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass

    def _spawn_gateway(self) -> None:
        mark = self.settings.gateway_mark
        self._spawn("app.backends.docker.egress.gateway",
                    gateway.log_path(self.settings.state_dir),
                    *(["--mark", str(mark)] if mark else []))


class EgressManager(Daemons):
    """Egress enforcement for the containers of one local Docker engine."""

    _orphans_checked = False  # once per process, on the first attach

    def __init__(self, api: docker.APIClient, engine_host: str,
                 settings: EgressSettings | None = None):
        super().__init__(settings)
        self.api = api
        self.engine_host = engine_host
        self._unavailable: str | None | bool = False  # False: not checked yet

    # -- availability --------------------------------------------------------------------

    def unavailable_reason(self) -> str | None:
        """None when this host can enforce egress for the engine's containers."""
        if self._unavailable is False:
            self._unavailable = self._check()
        return self._unavailable  # type: ignore[return-value]

    def _check(self) -> str | None:
        if not self.engine_host.startswith("unix://"):
            return (f"the Docker engine at {self.engine_host} is not on this host, so this "
                    "host's firewall cannot filter its containers")
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return "the app does not run as root, so it cannot manage nftables rules"
        reason = nft.available()
        if reason:
            return reason
        try:
            options = self.api.info().get("SecurityOptions") or []
        except docker.errors.DockerException as exc:
            return f"cannot ask the Docker engine about itself: {exc}"
        if any("rootless" in option for option in options):
            return "the Docker engine is rootless: its networks are not in this host's namespace"
        return None

    # -- create / delete -----------------------------------------------------------------

    def attach(self, policy: ResolvedNetworkPolicy, metadata: dict[str, str]) -> Attachment:
        """Network, rules, state file and resolver for a new sandbox; all or nothing."""
        egress = EgressPolicy.from_resolved(policy)  # invalid entries fail before any I/O
        self._cleanup_orphans_once()
        net_id, subnet = self._create_network(metadata)
        hosts = subnet.hosts()
        net = SandboxNet(id=net_id, subnet=str(subnet), gateway=str(next(hosts)),
                         upstream=self.settings.upstream, policy=egress, metadata=metadata,
                         gateway_port=self.settings.gateway_port)
        try:
            if not Path(f"/sys/class/net/{net.bridge}").exists():
                raise BackendError(f"bridge {net.bridge} of network {net.network} is not on "
                                   "this host: cannot enforce the network policy here")
            nft.apply(net)
            self._write_state(net)
            self._ensure_resolver(net)
            self._ensure_gateway(net)
        except BaseException:
            try:
                self.release(net_id)
            except BackendError as exc:
                log.warning("could not undo egress setup of %s: %s", net.network, exc)
            raise
        return Attachment(net.network, (net.gateway,), net_id)

    def release(self, net_id: str) -> None:
        """Remove the network, then the rules, then the state file. Gone is success."""
        self._remove_network(f"{NETWORK_PREFIX}{net_id}")
        nft.remove(net_id)
        self._state_file(net_id).unlink(missing_ok=True)

    def ensure(self, net_id: str) -> None:
        """Before a sandbox runs again: its rules present (rebuilt from the state file
        written at creation, so the policy is still the one it was created with) and its
        resolver up. Refuse rather than run a sandbox without its rules."""
        net = self.load(net_id)
        if net is None:  # another host's, or lost: either way not run without its policy
            raise SandboxHeldElsewhere(f"the egress state of network {NETWORK_PREFIX}{net_id} "
                                       "is not on this host, so its policy cannot be "
                                       "enforced here")
        if not nft.has_sandbox(net_id):
            log.warning("egress rules of %s were missing; rebuilding them", net.network)
            nft.remove(net_id)
            nft.apply(net)
        self._ensure_resolver(net)
        self._ensure_gateway(net)

    def revive(self, net_id: str) -> None:
        """Before a command: bring back a resolver or gateway that stopped (killed, or
        exited while idle), so a running sandbox's egress comes back by its next command.
        Two lock checks when both run."""
        if not self.resolver_running() or not self.gateway_running():
            log.warning("egress daemons of %s%s were down; starting them", NETWORK_PREFIX,
                        net_id)
            self.ensure(net_id)

    def update_policy(self, net_id: str, policy: ResolvedNetworkPolicy) -> None:
        """Apply a changed policy to a running sandbox (an admin's explicit choice; a
        policy is otherwise fixed at creation): its rules in one transaction, then its
        state file, which the resolver and the gateway re-read when woken."""
        egress = EgressPolicy.from_resolved(policy)  # invalid entries fail before any I/O
        net = self.load(net_id)
        if net is None:
            raise BackendError("this sandbox's egress state is gone; delete the sandbox")
        updated = dataclasses.replace(net, policy=egress)
        nft.run(nft.policy_script(updated))
        self._write_state(updated)
        self._wake_resolver()
        self._signal(gateway.pid_path(self.settings.state_dir), self.gateway_running())

    def log_mark(self, net_id: str) -> log_files.Mark:
        """Where the sandbox's egress log ends before a command (see `denied_since`)."""
        return log_files.mark(self.settings.state_dir, net_id)

    def denied_since(self, net_id: str, mark: log_files.Mark) -> tuple[dict, ...]:
        """What the gateway refused for this sandbox since `log_mark`."""
        return log_files.denied(log_files.since(self.settings.state_dir, net_id, mark))

    def load(self, net_id: str) -> SandboxNet | None:
        try:
            return SandboxNet.from_dict(json.loads(self._state_file(net_id).read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BackendError(f"unreadable egress state for {net_id}: {exc}") from None

    # -- networks ------------------------------------------------------------------------

    def _create_network(self, metadata: dict[str, str]) -> tuple[str, ipaddress.IPv4Network]:
        """A fresh network on a free /28 of the pool (the engine refuses overlaps, so
        concurrent creators simply try another)."""
        pool = self.settings.subnets
        count = 1 << (SUBNET_PREFIX - pool.prefixlen)
        last_error = ""
        for _ in range(min(count, 32)):
            net_id = secrets.token_hex(5)
            index = random.randrange(count)
            subnet = ipaddress.IPv4Network(
                (int(pool.network_address) + index * (1 << (32 - SUBNET_PREFIX)), SUBNET_PREFIX))
            gateway = str(next(subnet.hosts()))
            ipam = docker.types.IPAMConfig(
                pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)])
            labels = {**metadata, LABEL: net_id, CREATED_LABEL: str(int(time.time()))}
            try:
                self.api.create_network(
                    f"{NETWORK_PREFIX}{net_id}", driver="bridge", ipam=ipam, labels=labels,
                    options={"com.docker.network.bridge.name": f"sl-{net_id}"},
                    check_duplicate=True)
                return net_id, subnet
            except docker.errors.APIError as exc:
                last_error = str(exc.explanation or exc)
                if "overlap" not in last_error.lower() and "in use" not in last_error.lower():
                    raise BackendError(f"create sandbox network failed: {last_error}") from None
        raise BackendError(f"no free sandbox subnet in {pool} ({last_error}); widen "
                           "SANDBOX_EGRESS_SUBNETS or delete sandboxes")

    def _remove_network(self, name: str) -> None:
        deadline = time.monotonic() + 15
        while True:
            try:
                self.api.remove_network(name)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                # A container being removed may hold its endpoint for a moment.
                if "active endpoints" not in str(exc) or time.monotonic() > deadline:
                    raise BackendError(f"remove sandbox network {name} failed: "
                                       f"{exc.explanation or exc}") from None
                time.sleep(0.2)

    # -- orphans -------------------------------------------------------------------------

    def _cleanup_orphans_once(self) -> None:
        if EgressManager._orphans_checked:
            return
        EgressManager._orphans_checked = True
        try:
            removed = self.cleanup_orphans()
            if removed:
                log.info("removed egress leftovers of gone sandboxes: %s", ", ".join(removed))
        except (BackendError, docker.errors.DockerException) as exc:
            log.warning("egress orphan cleanup failed: %s", exc)

    def cleanup_orphans(self, grace_sec: float = ORPHAN_GRACE_SEC,
                        metadata: dict[str, str] | None = None) -> list[str]:
        """Remove networks, rules and state files whose container no longer exists;
        the egress ids removed. `metadata` limits this to sandboxes carrying it.

        A network without any container (running or not) is an orphan once older than
        `grace_sec` (younger ones may belong to a create in progress). Rules and state
        files are listed before the networks: both are made after their network, so one
        without a network is a leftover, never a sandbox being created."""
        wanted = metadata or {}
        leftovers = set() if wanted else nft.sandbox_ids()
        for path in dns.sandboxes_dir(self.settings.state_dir).glob("*.json"):
            try:
                net = self.load(path.stem) if EGRESS_ID.match(path.stem) else None
            except BackendError as exc:
                log.warning("%s", exc.reason)
                continue
            if net and wanted.items() <= net.metadata.items():
                leftovers.add(net.id)
        labels = [LABEL, *(f"{key}={value}" for key, value in wanted.items())]
        networks = {}
        for row in self.api.networks(filters={"label": labels}):
            net_id = (row.get("Labels") or {}).get(LABEL, "")
            if EGRESS_ID.match(net_id) and row.get("Name") == f"{NETWORK_PREFIX}{net_id}":
                networks[net_id] = row
        removed = []
        now = time.time()
        for net_id, row in networks.items():
            created = (row.get("Labels") or {}).get(CREATED_LABEL, "0")
            age = now - (int(created) if created.isdigit() else 0)
            if age < grace_sec or self.api.containers(all=True,
                                                      filters={"network": row["Id"]}):
                continue
            self.release(net_id)
            removed.append(net_id)
        for net_id in sorted(leftovers - set(networks)):
            if self._network_exists(net_id):
                continue  # not labelled as we asked, or made since we listed: not ours to judge
            nft.remove(net_id)
            self._state_file(net_id).unlink(missing_ok=True)
            removed.append(net_id)
        return removed

    def _network_exists(self, net_id: str) -> bool:
        try:
            self.api.inspect_network(f"{NETWORK_PREFIX}{net_id}")
            return True
        except docker.errors.NotFound:
            return False


_managers: dict[tuple[int, str, Path], EgressManager] = {}
_managers_lock = threading.Lock()


def shared_manager(api: docker.APIClient, engine_host: str) -> EgressManager:
    """One manager per (shared) client and state directory: its host check (an engine
    round trip) is done once per process, not once per request."""
    settings = EgressSettings.from_env()
    key = (id(api), engine_host, settings.state_dir)
    with _managers_lock:
        manager = _managers.get(key)
        if manager is None or manager.api is not api or manager.settings != settings:
            manager = _managers[key] = EgressManager(api, engine_host, settings)
        return manager


def _until_ready(answers, running, spawn, failure: str) -> None:
    """Wait until `answers()` (a daemon serves this sandbox), starting the daemon when it
    is not `running()` (again at most every 2 s); BackendError(`failure`) after
    READY_TIMEOUT_SEC. A refused probe comes back at once, so readiness costs
    milliseconds, not a sleep."""
    deadline = time.monotonic() + READY_TIMEOUT_SEC
    spawned = 0.0
    while True:
        if answers():
            return
        if not running() and time.monotonic() - spawned > 2:
            spawn()
            spawned = time.monotonic()
        if time.monotonic() > deadline:
            raise BackendError(failure)
        time.sleep(0.01)


def _states(state_dir: Path) -> list[SandboxNet]:
    files = dns.StateFiles(state_dir)
    files.refresh()
    return [net for net in files.nets.values() if net is not None]


def resolver_running(state_dir: Path) -> bool:
    """Is a resolver holding this state directory's lock?"""
    return holds_lock(dns.lock_path(state_dir))


def holds_lock(path: Path) -> bool:
    """Does a process hold this lock file (a resolver's or a gateway's)?"""
    if not path.exists():
        return False
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def gateway_probe(net: SandboxNet, timeout: float = 0.5) -> bool:
    """Does the gateway answer for this very sandbox on its gateway address? (From
    loopback, it answers who it serves and closes.)"""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.bind(("127.0.0.1", 0))
            sock.connect((net.gateway, net.gateway_port or 0))
            reply = sock.recv(64)
    except OSError:
        return False
    return reply == gateway.PROBE_REPLY % net.id.encode()


def probe(net: SandboxNet, timeout: float = 0.3) -> bool:
    """Does the resolver answer for this very sandbox on its gateway?

    The socket is connected, so while nothing listens there the port-unreachable
    comes back as ConnectionRefusedError at once instead of a wait for `timeout`."""
    query = DNSRecord.question(f"{net.id}{PROBE_SUFFIX}")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind(("127.0.0.1", 0))  # answered: loopback or the sandbox's subnet only
            sock.settimeout(timeout)
            sock.connect((net.gateway, 53))
            sock.send(query.pack())
            reply = DNSRecord.parse(sock.recv(4096))
    except (OSError, ValueError):
        return False
    return reply.header.id == query.header.id and reply.header.rcode == RCODE.NXDOMAIN
