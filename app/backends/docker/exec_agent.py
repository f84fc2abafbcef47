"""The host's side of the exec agent (issue 29): a small process of ours in each Docker
sandbox (agent/agent.py) that starts commands without the engine's API in the way.

Where it lives: a per-sandbox host directory under SANDBOX_AGENT_DIR (default
instance/agents), `<dir>/<token>/`, root's and 0700, holding the host's notes on the
agent (state.json) and `run/` (the sandbox user's, 0700), bind-mounted at /run/sandlot;
the agent's file is bind-mounted read-only at /opt/sandlot/agent.py. Both only on an
engine of this host with this process root (as loop disks); the container's labels
name the token and the directory, so any process of this host can find and release it.

The agent is started right after the container (and again after a restart) with one
detached `docker exec` as the sandbox user (never root: the container has no capability
to change users, and a root agent would be a way to root for whoever reaches it);
commands go through the engine while the agent is missing, not yet listening, dead or
misbehaving (logged once per sandbox start and process). An image without python3
simply never gets one. Runs as root always go through the engine.

Untrusted: every frame is size-capped, every wait has a deadline, and containment
(timeout, cancel, leftovers) is done from the host through the cgroup (reap.py), never
by asking the agent.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import shutil
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from app.backends.docker import reap as docker_reap

log = logging.getLogger("sandlot.docker.agent")

ROOT = Path(__file__).resolve().parents[3]
AGENT_FILE = Path(__file__).resolve().parent / "agent" / "agent.py"
LABEL = "sandlot.agent"  # on the container: the token of its agent directory
DIR_LABEL = "sandlot.agent_dir"  # ...and the SANDBOX_AGENT_DIR it was made in
IN_SANDBOX_RUN = "/run/sandlot"
IN_SANDBOX_FILE = "/opt/sandlot/agent.py"
# What the engine adds to a container's own layer for the mounts (empty mount points).
MOUNT_POINTS = frozenset({IN_SANDBOX_RUN, IN_SANDBOX_FILE, str(Path(IN_SANDBOX_FILE).parent)})
SANDBOX_UID = 1000
CONNECT_SEC = 1.0
HELLO_SEC = 2.0  # how long the agent may take to say it started the command
MAX_FRAME = 1 << 20
HELLO = struct.Struct(">BxxxL")
ORPHAN_GRACE_SEC = 600
READY_SEC = 1.0  # how long a sandbox's first exec waits for its new agent to listen


class AgentBroken(Exception):
    """The agent did not follow its protocol; nothing is known to have started."""


def enabled() -> bool:
    return (os.environ.get("SANDBOX_EXEC_AGENT") or "1").lower() not in (
        "0", "false", "off", "no")


def agent_dir() -> Path:
    path = Path(os.environ.get("SANDBOX_AGENT_DIR") or ROOT / "instance" / "agents")
    return path if path.is_absolute() else ROOT / path


def available(engine_host: str) -> bool:
    """Can sandboxes of this engine get an agent (same host, this process root)?"""
    return (enabled() and engine_host.startswith("unix://") and hasattr(os, "geteuid")
            and os.geteuid() == 0 and AGENT_FILE.is_file())


@dataclass(frozen=True)
class AgentDir:
    token: str
    directory: str

    @property
    def path(self) -> Path:
        return Path(self.directory) / self.token

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL: self.token, DIR_LABEL: self.directory}

    @property
    def mounts(self) -> tuple[docker.types.Mount, ...]:
        return (docker.types.Mount(IN_SANDBOX_RUN, str(self.path / "run"), type="bind"),
                docker.types.Mount(IN_SANDBOX_FILE, str(AGENT_FILE), type="bind",
                                   read_only=True))


def create() -> AgentDir:
    """The host directory of a new sandbox's agent."""
    base = agent_dir()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    made = AgentDir(secrets.token_hex(8), str(base))
    made.path.mkdir(mode=0o700)
    run = made.path / "run"
    run.mkdir(mode=0o700)
    os.chown(run, SANDBOX_UID, SANDBOX_UID)
    return made


def of(container: dict[str, Any]) -> AgentDir | None:
    """The agent directory of an inspected container, if it has one."""
    labels = (container.get("Config") or {}).get("Labels") or {}
    token, directory = labels.get(LABEL) or "", labels.get(DIR_LABEL) or ""
    if len(token) != 16 or not all(c in "0123456789abcdef" for c in token) or \
            not Path(directory).is_absolute():
        return None
    return AgentDir(token, directory)


def release(found: AgentDir | None) -> None:
    """Delete a sandbox's agent directory (its container is gone); gone is success."""
    if found is not None:
        shutil.rmtree(found.path, ignore_errors=True)


def sweep_orphans(api: Any, grace_sec: float = ORPHAN_GRACE_SEC) -> list[str]:
    """Release agent directories older than `grace_sec` no container carries."""
    removed = []
    base = agent_dir()
    if not base.is_dir():
        return removed
    now = time.time()
    for path in sorted(base.iterdir()):
        token = path.name
        if len(token) != 16 or not path.is_dir():
            continue
        try:
            young = now - path.stat().st_mtime < grace_sec
        except FileNotFoundError:
            continue
        if young or api.containers(all=True, filters={"label": f"{LABEL}={token}"}):
            continue
        release(AgentDir(token, str(base)))
        removed.append(token)
    return removed


# -- the agent of a running container -------------------------------------------------

@dataclass(frozen=True)
class Live:
    """An agent known to run: its socket, and its host pid and start ticks."""

    socket: str
    pid: int
    ticks: int


_live: dict[str, Live | None] = {}  # container id + start -> the agent, None: none
_said: set[str] = set()  # containers whose fallback was logged
served = 0  # runs this process ran through an agent to their end (tests, bench)
asked = 0  # runs this process would have run through an agent


def _key(container: dict[str, Any]) -> str:
    return f"{container['Id']}@{(container.get('State') or {}).get('StartedAt', '')}"


def _alive(pid: int, ticks: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19]) == ticks
    except (OSError, IndexError, ValueError):
        return False


def fallback(container: dict[str, Any], why: str) -> None:
    """Log (once per sandbox start) that its commands go through the engine, and why."""
    key = _key(container)
    _live[key] = None
    if key not in _said:
        _said.add(key)
        log.warning("sandbox %s: exec agent %s; its commands go through docker exec",
                    container["Id"][:12], why)


def _locked(found: AgentDir, step: Callable[[dict[str, Any]], Live | None]) -> Live | None:
    """`step(state)` under the lock of the agent's state file (shared by this host's
    processes), which is then saved."""
    with open(found.path / "state.json", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        state = json.loads(handle.read() or "{}")
        live = step(state)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(state))
    return live


def launch(api: Any, container: dict[str, Any], engine_host: str) -> None:
    """Start the agent of a sandbox just started (one detached exec); never raises."""
    found = of(container)
    if found is None or not available(engine_host):
        return
    try:
        _locked(found, lambda state: _launch(api, container, found, state))
    except (OSError, ValueError, docker.errors.DockerException) as exc:
        fallback(container, f"could not be started ({exc.__class__.__name__})")


def _launch(api: Any, container: dict[str, Any], found: AgentDir,
            state: dict[str, Any]) -> None:
    state.clear()
    state["started_at"] = (container.get("State") or {}).get("StartedAt", "")
    run = found.path / "run"
    os.chown(run, SANDBOX_UID, SANDBOX_UID)  # the agent makes its socket there
    os.chmod(run, 0o700)
    (run / "agent.sock").unlink(missing_ok=True)
    try:
        # No workdir: the agent's is the image's, which a run without cwd gets.
        exec_id = api.exec_create(container["Id"], ["python3", "-I", IN_SANDBOX_FILE],
                                  stdout=False, stderr=False, user="sandbox")["Id"]
        api.exec_start(exec_id, detach=True)
    except docker.errors.DockerException as exc:  # no python3, no sandbox user
        state["failed"] = "could not be started"
        fallback(container, f"could not be started ({exc.__class__.__name__})")
        return
    state["exec_id"] = exec_id


def find(api: Any, container: dict[str, Any], engine_host: str) -> Live | None:
    """The container's live agent (started now if this container start has none yet);
    None when it has none, or it is not ready within READY_SEC."""
    key = _key(container)
    known = _live.get(key, False)
    if known is None:
        return None
    if known and _alive(known.pid, known.ticks):
        return known
    found = of(container)
    if found is None or not available(engine_host):
        return None
    try:
        live = _locked(found, lambda state: _look(api, container, found, state))
    except (OSError, ValueError, docker.errors.DockerException) as exc:
        fallback(container, f"could not be reached ({exc.__class__.__name__})")
        return None
    if live is not None:
        _live[key] = live
    return live


def _look(api: Any, container: dict[str, Any], found: AgentDir,
          state: dict[str, Any]) -> Live | None:
    """Under the state file's lock: learn the agent's pid once it listens."""
    if state.get("started_at") != (container.get("State") or {}).get("StartedAt", ""):
        _launch(api, container, found, state)  # restarted since: a new agent
    if state.get("failed"):
        fallback(container, str(state["failed"]))
        return None
    run = found.path / "run"
    if not state.get("pid"):
        deadline = time.monotonic() + READY_SEC
        while True:
            info = api.exec_inspect(state.get("exec_id", ""))
            if not info.get("Running") or not info.get("Pid"):
                state["failed"] = f"exited with code {info.get('ExitCode')} (no python3?)"
                fallback(container, state["failed"])
                return None
            if (run / "agent.sock").is_socket():
                break
            if time.monotonic() > deadline:
                return None  # not listening yet: this command goes through the engine
            time.sleep(0.01)
        # Listening: from now on the sandbox user may not replace the socket (the
        # agent's own, 0600) with one of its own: the directory becomes root's.
        os.chown(run, 0, 0)
        os.chmod(run, 0o755)
        pid = int(info["Pid"])
        with open(f"/proc/{pid}/stat") as stat:
            state["ticks"] = int(stat.read().rsplit(")", 1)[1].split()[19])
        state["pid"] = pid
    live = Live(str(run / "agent.sock"), int(state["pid"]), int(state["ticks"]))
    if not _alive(live.pid, live.ticks):
        state["failed"] = "died"
        fallback(container, "died")
        return None
    return live


# -- one run --------------------------------------------------------------------------

def start(live: Live, argv: list[str], env: dict[str, str] | None,
          cwd: str | None) -> tuple[socket.socket, int, int]:
    """Ask the agent to start `argv`: the connection (output frames follow) and the
    child's pid and start ticks as the agent reports them. AgentBroken when it did not
    answer as it should (then nothing is known to run)."""
    request = json.dumps({"argv": argv, "env": dict(env or {}), "cwd": cwd or ""}).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_SEC)
        sock.connect(live.socket)
        sock.sendall(struct.pack(">L", len(request)) + request)
        sock.settimeout(HELLO_SEC)
        header = _exactly(sock, HELLO.size)
        kind, size = HELLO.unpack(header)
        if kind != 4 or size > 64:
            raise AgentBroken(f"answered frame {kind} of {size} bytes first")
        words = _exactly(sock, size).split()
        if len(words) != 2 or not all(w.isdigit() for w in words):
            raise AgentBroken("did not start the command")
        return sock, int(words[0]), int(words[1])
    except (OSError, AgentBroken) as exc:
        sock.close()
        raise AgentBroken(str(exc)[:200]) from None


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise AgentBroken("closed the connection")
        data += chunk
    return bytes(data)


def host_pid(init_pid: int, ns_pid: int, ticks: int) -> int | None:
    """The host pid of the container's process that is `ns_pid` inside it and started
    at `ticks`, if it still runs."""
    group = docker_reap._cgroup(init_pid) if init_pid > 1 else None
    pids = group.pids() if group else None
    for pid in pids or ():
        if not _alive(pid, ticks):
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        line = next((x for x in status.splitlines() if x.startswith("NSpid:")), "")
        if line.split()[-1:] == [str(ns_pid)]:
            return pid
    return None
