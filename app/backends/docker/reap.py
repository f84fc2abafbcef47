"""Kill what a timed-out exec left behind in its container (decisions 12).

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

Needs the engine on this host and root (the same conditions as egress enforcement);
elsewhere only the process-group kill applies.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
WAIT_SEC = 3.0  # sweep until nothing is left (a process may fork while we read /proc),
# and until the killed are reaped: a zombie still holds its pid against the pids limit,
# so the next command could not start.


def now_ticks() -> int:
    """Boot-relative clock ticks, the unit of a process's start time in /proc."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLK_TCK)


def available(engine_host: str) -> bool:
    return (engine_host.startswith("unix://") and hasattr(os, "geteuid")
            and os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup"))


def _stat(pid: int) -> tuple[int, int, bool] | None:
    """(parent pid, start ticks, is a zombie) of a host pid, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[19]), fields[0] == "Z"


def _cgroup(pid: int) -> tuple[str, Path] | None:
    """A process's pids cgroup line and that cgroup's cgroup.procs (v1 or v2)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "pids":
            return line, Path(f"/sys/fs/cgroup/pids{path}/cgroup.procs")
        if controllers == "" and line.startswith("0::"):
            return line, Path(f"/sys/fs/cgroup{path}/cgroup.procs")
    return None


def _kill(pid: int, cgroup_line: str) -> bool:
    """SIGKILL `pid` only if it is still in the container's cgroup: the pid is pinned
    (pidfd) before the check, so a pid freed and reused by a host process in between
    is never signalled."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        found = _cgroup(pid)
        if found is None or found[0] != cgroup_line:
            return False
        signal.pidfd_send_signal(handle, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(handle)


def _under(pid: int, parents: dict[int, int], roots: set[int]) -> bool:
    seen = set()
    while pid in parents and pid not in seen:
        if pid in roots:
            return True
        seen.add(pid)
        pid = parents[pid]
    return pid in roots


def _main_process(init_pid: int, stats: dict[int, tuple[int, int, bool]]) -> int | None:
    """The container's main process: the init's first child (earliest start, then
    lowest pid). Orphans reparented to the init always start after it."""
    children = [(start, pid) for pid, (parent, start, _) in stats.items()
                if parent == init_pid]
    return min(children)[1] if children else None


def reap(init_pid: int, since_ticks: int, protected_roots: set[int]) -> int:
    """SIGKILL every process of the container started at or after `since_ticks` that
    is not its init, its main process nor under one of `protected_roots` (other live
    execs); the count."""
    found = _cgroup(init_pid) if init_pid > 1 else None
    if found is None or found[0].endswith(":/"):
        return 0  # not in a container's own cgroup: never sweep the host's
    cgroup_line, procs = found
    killed = 0
    main = None
    deadline = time.monotonic() + WAIT_SEC
    while time.monotonic() < deadline:
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except OSError:
            return killed
        stats = {pid: stat for pid in pids if (stat := _stat(pid))}
        parents = {pid: stat[0] for pid, stat in stats.items()}
        main = main or _main_process(init_pid, stats)
        left = [pid for pid, (_, start, _) in stats.items()
                if pid not in (init_pid, main) and start >= since_ticks
                and not _under(pid, parents, protected_roots)]
        if not left:
            return killed
        killed += sum(_kill(pid, cgroup_line) for pid in left if not stats[pid][2])
        time.sleep(0.02)
    return killed
