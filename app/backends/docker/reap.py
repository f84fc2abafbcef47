"""Kill what a timed-out or cancelled exec left behind in its container (decisions 12).

`timeout -s KILL` in the container kills the command's process group, which is all of
an ordinary command. A process that left the group (`setsid`, a daemon) survives that,
and may keep the sandbox's process budget, CPU or output stream. After a timeout the
backend therefore kills, from the host, every process of the container's cgroup that
started at or after the exec began, except the container's init, its main process and
what belongs to another exec still running there. Orphans are reparented to the
container's init, so "started during the exec and not under another live exec" is what
identifies them. The main process (`sleep infinity`, forked by the init) is told apart
by being the init's earliest child: on a busy host it can start in the same clock tick
as an exec sent right after the container started, or later.

A fork bomb forks faster than anyone can kill it pid by pid from /proc, so the sweep
first freezes the container's cgroup (the freezer `docker pause` uses): nothing in it
runs or forks while the frozen process list is read and every leftover is sent SIGKILL,
and on thaw each of them dies before it runs another instruction. The sweep then waits
until the init has reaped them: a zombie still holds its pid against the pids limit, so
the next command could not start. Where the freezer cannot be used, the same selection
runs in a loop until a pass finds nothing left (the old way, which a bomb can outrun).

Needs the engine on this host and root (the same conditions as egress enforcement);
elsewhere only the process-group kill applies, and the backend says so in the result.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
CGROUP_ROOT = Path("/sys/fs/cgroup")
WAIT_SEC = 3.0  # the whole sweep: freeze, kill, thaw, and the init reaping the killed
FREEZE_SEC = 1.0  # a task stuck in the kernel (D state) may keep a cgroup FREEZING


def now_ticks() -> int:
    """Boot-relative clock ticks, the unit of a process's start time in /proc."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLK_TCK)


def available(engine_host: str) -> bool:
    return (engine_host.startswith("unix://") and hasattr(os, "geteuid")
            and os.geteuid() == 0 and CGROUP_ROOT.is_dir())


@dataclass(frozen=True)
class Reaped:
    """What a sweep did: how many it killed, and whether all of them are gone (reaped,
    their pids free again) within the sweep's time."""

    killed: int
    settled: bool


def _stat(pid: int) -> tuple[int, int, bool] | None:
    """(parent pid, start ticks, is a zombie) of a host pid, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[19]), fields[0] == "Z"


@dataclass(frozen=True)
class _Cgroup:
    """The container's cgroup as the sweep uses it: the line of /proc/<pid>/cgroup that
    identifies membership, the process list, and the freezer's control file."""

    line: str
    procs: Path
    freezer: Path | None  # v1 freezer.state, or v2 cgroup.freeze
    v2: bool

    def pids(self) -> list[int] | None:
        try:
            return [int(p) for p in self.procs.read_text().split()]
        except OSError:
            return None


def _cgroup_lines(pid: int) -> dict[str, tuple[str, str]]:
    """controller -> (line, path) from /proc/<pid>/cgroup; "" is the v2 hierarchy."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return {}
    found: dict[str, tuple[str, str]] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            found.setdefault(controller, (line, path))
    return found


def _cgroup(pid: int) -> _Cgroup | None:
    """The pids cgroup a process is in (v1 `pids` hierarchy, or v2 unified), with the
    freezer of the same container."""
    lines = _cgroup_lines(pid)
    if "pids" in lines:  # v1 (or hybrid, where the container's controllers are v1)
        line, path = lines["pids"]
        freezer = lines.get("freezer")
        state = CGROUP_ROOT / f"freezer{freezer[1]}" / "freezer.state" if freezer else None
        return _Cgroup(line, CGROUP_ROOT / f"pids{path}" / "cgroup.procs",
                       state if state and state.exists() else None, v2=False)
    if "" in lines and (CGROUP_ROOT / "cgroup.controllers").exists():
        line, path = lines[""]
        freeze = CGROUP_ROOT / path.lstrip("/") / "cgroup.freeze"
        return _Cgroup(line, CGROUP_ROOT / path.lstrip("/") / "cgroup.procs",
                       freeze if freeze.exists() else None, v2=True)
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _is_frozen(group: _Cgroup) -> bool:
    assert group.freezer is not None
    if group.v2:
        return "frozen 1" in _read(group.freezer.with_name("cgroup.events")).splitlines()
    return _read(group.freezer) == "FROZEN"


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


@contextmanager
def _frozen(group: _Cgroup) -> Iterator[bool]:
    """Freeze the cgroup for the block; yields whether it is frozen. A cgroup someone
    else froze (a paused sandbox) is left as it is, and never thawed here."""
    freezer = group.freezer
    if freezer is None or _read(freezer) not in ("THAWED", "0"):
        yield False
        return
    frozen_value, thawed_value = ("1", "0") if group.v2 else ("FROZEN", "THAWED")
    deadline = time.monotonic() + FREEZE_SEC
    frozen = False
    try:
        while _write(freezer, frozen_value) and time.monotonic() < deadline:
            if frozen := _is_frozen(group):
                break
            time.sleep(0.002)
        yield frozen
    finally:
        _write(freezer, thawed_value)


def _kill(pid: int, cgroup_line: str) -> bool:
    """SIGKILL `pid` only if it is still in the container's cgroup: the pid is pinned
    (pidfd) before the check, so a pid freed and reused by a host process in between
    is never signalled."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/cgroup") as membership:
            if cgroup_line not in membership.read().splitlines():
                return False
        signal.pidfd_send_signal(handle, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(handle)


def _under(pid: int, parents: dict[int, int], roots: set[int],
           targets: set[int] | frozenset[int] = frozenset()) -> bool:
    """Whether `pid` is one of `roots` or under one, not counting what is at or under a
    target on the way up (a run the exec agent started is under the agent, an exec root
    that is spared, yet it and its tree are the ones being ended)."""
    seen = set()
    while pid in parents and pid not in seen:
        if pid in targets:
            return False
        if pid in roots:
            return True
        seen.add(pid)
        pid = parents[pid]
    return pid in roots and pid not in targets


def _main_process(init_pid: int, stats: dict[int, tuple[int, int, bool]]) -> int | None:
    """The container's main process: the init's first child (earliest start, then
    lowest pid). Orphans reparented to the init always start after it."""
    children = [(start, pid) for pid, (parent, start, _) in stats.items()
                if parent == init_pid]
    return min(children)[1] if children else None


def _outside(pid: int, cgroup_line: str) -> bool:
    """Whether a live process is outside the container (a pid that is gone, or is
    exiting inside it, is not: its children are being handed to the container's init)."""
    try:
        with open(f"/proc/{pid}/cgroup") as membership:
            return cgroup_line not in membership.read().splitlines()
    except OSError:
        return False


class _Sweep:
    """One sweep's state: the leftovers signalled so far (pid -> start ticks)."""

    def __init__(self, group: _Cgroup, init_pid: int, since_ticks: int,
                 protected: Iterable[int], targets: Iterable[int]):
        self.group, self.init_pid, self.since = group, init_pid, since_ticks
        self.protected, self.targets = set(protected), set(targets)
        self.main: int | None = None
        self.victims: dict[int, int] = {}

    def exec_roots(self, stats: dict[int, tuple[int, int, bool]]) -> set[int]:
        """The processes the engine started for other execs, read from the process tree:
        an exec's first process is the only kind whose parent is outside the container
        (the engine's shim); leftovers and their children always have their parent, or
        the init they were handed to, inside. The execs being ended are not spared."""
        return {pid for pid, (parent, _, _) in stats.items()
                if pid != self.init_pid and pid not in self.targets and parent not in stats
                and _outside(parent, self.group.line)}

    def leftovers(self) -> list[tuple[int, int]] | None:
        """(pid, start ticks) of every leftover not signalled yet (None: the cgroup is
        gone, so is the container)."""
        pids = self.group.pids()
        if pids is None:
            return None
        stats = {pid: stat for pid in pids if (stat := _stat(pid))}
        parents = {pid: stat[0] for pid, stat in stats.items()}
        self.main = self.main or _main_process(self.init_pid, stats)
        spared = self.protected | self.exec_roots(stats)
        return [(pid, start) for pid, (_, start, zombie) in stats.items()
                if not (pid in (self.init_pid, self.main) or start < self.since or zombie
                        or self.victims.get(pid) == start
                        or _under(pid, parents, spared, self.targets))]

    def kill_pass(self) -> int:
        """Signal every leftover not signalled yet; how many were new (-1: the cgroup
        is gone, so is the container)."""
        found = self.leftovers()
        if found is None:
            return -1
        new = 0
        for pid, start in found:
            if _kill(pid, self.group.line):
                self.victims[pid] = start
                new += 1
        return new

    def gone(self) -> bool:
        """Every victim reaped: no pid of theirs is still a process (alive or zombie)."""
        for pid, start in list(self.victims.items()):
            stat = _stat(pid)
            if stat is None or stat[1] != start:
                del self.victims[pid]
        return not self.victims


def left_behind(init_pid: int, since_ticks: int) -> bool:
    """Whether anything started at or after `since_ticks` still runs in the container
    outside every exec still running there: what an exec that just ended left (a
    background job, a `setsid` daemon). A read of the process list, no freeze, so the
    check after every exec costs well under a millisecond when nothing is left."""
    group = _cgroup(init_pid) if init_pid > 1 else None
    if group is None or group.line.endswith(":/"):
        return False
    return bool(_Sweep(group, init_pid, since_ticks, (), ()).leftovers())


def reap(init_pid: int, since_ticks: int, protected_roots: Iterable[int] = (),
         targets: Iterable[int] = ()) -> Reaped:
    """SIGKILL every process of the container started at or after `since_ticks` that
    is not its init, its main process, nor under another exec still running there or
    one of `protected_roots`; the first processes of the execs in `targets` (host pids)
    and all under them are killed too. Then wait until they are reaped.

    Other execs are told apart by the process tree while the container is frozen, not by
    asking the engine: no call that can wait on the engine is made while the container
    cannot run, and an exec started just before the sweep is spared as well."""
    group = _cgroup(init_pid) if init_pid > 1 else None
    if group is None or group.line.endswith(":/"):
        return Reaped(0, True)  # not in a container's own cgroup: never sweep the host's
    deadline = time.monotonic() + WAIT_SEC
    sweep = _Sweep(group, init_pid, since_ticks, protected_roots, targets)
    with _frozen(group):
        if sweep.kill_pass() < 0:
            return Reaped(0, True)
    # Thawed: what was signalled dies now. Unfrozen (no freezer, or it did not settle)
    # a leftover may have forked meanwhile, so pass again until a pass finds none.
    killed = len(sweep.victims)
    while time.monotonic() < deadline:
        new = sweep.kill_pass()
        if new < 0:
            return Reaped(killed, True)
        killed += new
        if not new and sweep.gone():
            return Reaped(killed, True)
        time.sleep(0.005)
    return Reaped(killed, sweep.gone())
