"""Commands in a Docker sandbox: `docker exec` under `timeout -s KILL`, the exit code
read back from behind a marker on stderr, and what a timed-out or cancelled command left
behind reaped from the host (reap.py).

A mixin of DockerBackend (it uses the backend's `api`, `_errors`, `_recent`, `_confirm`,
`_forget`, `_running_data` and `settings`); DockerFiles runs its helper scripts through
`_run` too.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from app.backends.base import (
    NEW_FILES_MAX,
    BackendError,
    ExecResult,
    SandboxNotFound,
    SandboxStale,
    Unsupported,
    new_files_script,
)
from app.backends.docker import exec_agent
from app.backends.docker import io as docker_io
from app.backends.docker import reap as docker_reap
from app.backends.docker.egress.manager import egress_id_of
from app.backends.docker.files import user_name

HOST_GRACE_SEC = 5  # host-side backstop after the in-container `timeout`
AGENT_REF = "agent:"  # a run the exec agent started: agent:<pid inside>:<start ticks>
START_WAIT_SEC = 3  # how long a cancel waits for an exec it caught before its start


def _noted(stderr: str, note: str) -> str:
    """stderr with a line of ours at its end, when there is something to say."""
    if not note:
        return stderr
    if stderr and not stderr.endswith("\n"):
        stderr += "\n"
    return f"{stderr}sandlot: {note}\n"


class DockerCommands:
    """`exec` and `cancel_exec` of DockerBackend, and the one exec everything else runs."""

    def _run(self, container_id: str, argv: list[str], *, user: str, cwd: str | None,
             env: dict[str, str] | None, deadline_sec: float,
             limit: int, marker: str = "", on_output: docker_io.OnOutput | None = None,
             on_started: Callable[[str], None] | None = None,
             looked: str = "") -> docker_io.RawRun:
        """One exec; `looked` names the sandbox when its running state came from a recent
        look rather than an inspect (a refusal at exec create then raises SandboxStale)."""
        secrets = tuple((env or {}).values())
        started = time.monotonic()
        try:
            with self._errors("exec", secrets):
                exec_id = self.api.exec_create(
                    container_id, argv, stdout=True, stderr=True, user=user, workdir=cwd,
                    environment=dict(env or {}))["Id"]
        except BackendError as exc:
            self._forget(container_id, looked)
            # paused (409), stopped (409) or removed (404) since the look: nothing ran
            if looked and type(exc) in (BackendError, SandboxNotFound):
                raise SandboxStale(exc.reason) from exc
            raise
        self._confirm(container_id, looked)
        with self._errors("exec", secrets):
            if on_started is not None:
                on_started(exec_id)
            response = docker_io.start_exec(self.api, exec_id)
            extra = len(marker) + 8 if marker else 0  # stderr's room for the exit line
            out, raw_err, truncated, hit = docker_io.read_exec(
                response, started + deadline_sec, limit, extra,
                docker_io.HoldBack(on_output, marker) if on_output else None)
            raw_err, new_files = docker_io.take_new_files(raw_err, marker)
            err, code, overflow = docker_io.take_exit_marker(raw_err, marker, limit)
            # stderr below its cap: any truncation was stdout's
            truncated = overflow or (truncated and len(raw_err) < limit + extra)
            if code is None:  # no marker: killed outright, or its stderr overflowed
                code = docker_io.wait_exit_code(self.api, exec_id, 0.2 if hit else 2.0)
        return docker_io.RawRun(out, err, code, time.monotonic() - started, truncated, hit,
                                exec_id, new_files)

    def _run_agent(self, data: dict[str, Any], argv: list[str], *, cwd: str | None,
                   env: dict[str, str] | None, deadline_sec: float, limit: int,
                   marker: str, on_output: docker_io.OnOutput | None,
                   on_started: Callable[[str], None] | None,
                   looked: str) -> docker_io.RawRun | None:
        """`_run` through the sandbox's exec agent (exec_agent.py), as the sandbox user;
        None when the agent is missing or broke its protocol before the command started
        (the caller then goes through the engine). An agent lost mid-run leaves a run
        without exit code (RawRun.exit_code None), which the caller ends from the host."""
        exec_agent.asked += 1
        live = exec_agent.find(self.api, data, self.settings.host)
        if live is None:
            return None
        started = time.monotonic()
        try:
            sock, ns_pid, ticks = exec_agent.start(live, argv, env, cwd)
        except exec_agent.AgentBroken as exc:
            exec_agent.fallback(data, str(exc))
            return None
        self._confirm(data["Id"], looked)
        ref = f"{AGENT_REF}{ns_pid}:{ticks}"
        ended: list[int | None] = []

        def other(kind: int, payload: bytes) -> bool:
            if kind == 3:
                ended.append(int(payload) if payload.isdigit() and len(payload) < 4 else None)
            return kind == 3

        extra = len(marker) + 8
        reader = sock.makefile("rb")
        try:
            if on_started is not None:
                on_started(ref)
            out, raw_err, truncated, hit = docker_io.read_frames(
                reader, sock, started + deadline_sec, limit, extra,
                docker_io.HoldBack(on_output, marker) if on_output else None,
                other, exec_agent.MAX_FRAME)
        except (OSError, docker_io.FrameTooLarge) as exc:
            exec_agent.fallback(data, f"broke off a run ({exc.__class__.__name__})")
            out, raw_err, truncated, hit = b"", b"", False, False
        finally:
            reader.close()
            sock.close()
        raw_err, new_files = docker_io.take_new_files(raw_err, marker)
        err, code, overflow = docker_io.take_exit_marker(raw_err, marker, limit)
        truncated = overflow or (truncated and len(raw_err) < limit + extra)
        lost = code is None and not ended and not hit
        if lost:
            # The command may still run without anyone reading its output: it is
            # waited for (up to the deadline) from the host, so a timeout still reads
            # as one; the caller then ends what is left.
            exec_agent.fallback(data, "went away during a run")
            end = started + deadline_sec
            while self._targets(data, ref) and time.monotonic() < end:
                time.sleep(0.05)
            hit = time.monotonic() >= end
        elif code is None:
            code = ended[0] if ended else None
        exec_agent.served += code is not None
        return docker_io.RawRun(out, err, code, time.monotonic() - started, truncated, hit,
                                ref, new_files, lost)

    def _targets(self, data: dict[str, Any], ref: str) -> list[int]:
        """Host pids of the run's first process while it still runs (an exec's, or the
        one the agent started)."""
        if ref.startswith(AGENT_REF):
            ns_pid, _, ticks = ref[len(AGENT_REF):].partition(":")
            found = exec_agent.host_pid(int(data["State"].get("Pid") or 0), int(ns_pid),
                                        int(ticks.partition(":")[0]))
            return [found] if found else []
        with self._errors("exec inspect"):
            info = self.api.exec_inspect(ref)
        return [int(info["Pid"])] if info.get("Running") and info.get("Pid") else []

    def _started_exec(self, exec_id: str) -> dict[str, Any]:
        """The exec's inspect, once it has started: the handle reaches the caller just
        before the engine starts the exec, and a cancel in between must not read "not
        running" as "already ended" (the command would then run to its timeout)."""
        deadline = time.monotonic() + START_WAIT_SEC
        while True:
            with self._errors("exec inspect"):
                info = self.api.exec_inspect(exec_id)
            never_started = not info.get("Running") and info.get("ExitCode") is None
            if not never_started or time.monotonic() > deadline:
                return info
            time.sleep(0.05)

    def _reap(self, data: dict[str, Any], since_ticks: int, exec_id: str) -> str:
        """After a timeout or a cancel: kill the exec and what it left outside its
        process group, sparing the container's init and every other exec still running
        (reap.py). Returns a sentence for the run's result when leftovers may remain,
        else ""."""
        if not docker_reap.available(self.settings.host):
            return ("processes this command may have left outside its process group "
                    "cannot be ended from here: the Docker engine is not on this host")
        reaped = docker_reap.reap(int(data["State"].get("Pid") or 0), since_ticks,
                                  targets=self._targets(data, exec_id))
        if reaped.settled:
            return ""
        return ("some processes this command left were still exiting when it ended; "
                "the sandbox may be short of processes for a moment")

    def exec(self, sandbox_id: str, command: str, *, user: str | None = None,
             cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: int = 60, output_limit: int = 1 << 20,
             on_output: docker_io.OnOutput | None = None,
             on_started: Callable[[str], None] | None = None,
             keep_processes: bool = False, new_files_in: str | None = None) -> ExecResult:
        """Run `command` with `sh -c`, killed after `timeout_sec` (exit 137, timed_out).

        What the command leaves running when it ends (a background job, a `setsid`
        daemon) is ended with it, so nothing of one command reads a later one's
        environment, unless `keep_processes` (issue 22 item 7).

        With `new_files_in`, the same exec counts the regular files under that folder
        the command created or changed (result.new_files): no extra round trip.

        `on_output(stream, chunk)` sees the output live (the exit line excluded);
        `on_started(ref)` gets the handle `cancel_exec` takes, before the command starts.

        stdout and stderr are each kept up to `output_limit` bytes (truncated=True when
        more was produced). If the host-side backstop fires first (something kept the
        output open), the result is timed_out with exit code 124 when the engine has
        none yet.
        """
        timeout_sec = timeout_sec if timeout_sec > 0 else 60
        recent = self._recent(sandbox_id)
        data = recent if recent is not None else self._running_data(sandbox_id)
        egress_id = egress_id_of(data)
        egress_mark = None
        if egress_id:
            with self._errors("restore sandbox egress"):
                self.egress.revive(egress_id)
            egress_mark = self.egress.log_mark(egress_id)
        # The exit code comes back as the last line of stderr, behind a marker the
        # command cannot guess: one engine round trip (exec inspect) less per exec.
        marker = f"\n.sandlot-exit-{secrets.token_hex(8)}:"
        count = new_files_script('"$4"', '"$5"')
        argv = ["sh", "-c", 'timeout -s KILL "$1" sh -c "$2"; c=$?; n=; if [ -n "$4" ]; then '
                f'n=$({count}); fi; printf "%s%d%s" "$3" $c "${{n:+:$n}}" >&2; exit $c', "sh",
                str(timeout_sec), command, marker, new_files_in or "", f"{time.time():.6f}"]
        since = docker_reap.now_ticks()
        started = (lambda exec_id: on_started(f"{exec_id}:{since}")) if on_started else None
        looked = sandbox_id if recent is not None else ""
        run = None
        if user_name(user) != "root" and exec_agent.enabled():
            run = self._run_agent(data, argv, cwd=cwd, env=env,
                                  deadline_sec=timeout_sec + HOST_GRACE_SEC,
                                  limit=output_limit, marker=marker, on_output=on_output,
                                  on_started=started, looked=looked)
        if run is None:
            run = self._run(data["Id"], argv, user=user_name(user), cwd=cwd, env=env,
                            deadline_sec=timeout_sec + HOST_GRACE_SEC, limit=output_limit,
                            marker=marker, on_output=on_output, on_started=started,
                            looked=looked)
        lost = run.lost
        killed = (lost or run.exit_code in (124, 137)) and run.elapsed >= timeout_sec
        note = ""
        if lost:  # the agent went away mid-run: end what is left of the command
            note = self._reap(data, since, run.exec_id) or (
                "the sandbox's exec agent stopped during this command; its output and "
                "exit code were lost")
        elif killed or run.deadline_hit:
            note = self._reap(data, since, run.exec_id)
        elif not keep_processes and docker_reap.available(self.settings.host) and \
                docker_reap.left_behind(int(data["State"].get("Pid") or 0), since):
            note = self._reap(data, since, run.exec_id)
        exit_code = run.exit_code if run.exit_code is not None else (
            137 if lost and killed else 125 if lost else 124)
        return ExecResult(stdout=run.stdout.decode("utf-8", "replace"),
                          stderr=_noted(run.stderr.decode("utf-8", "replace"), note),
                          exit_code=exit_code, duration_ms=int(run.elapsed * 1000),
                          timed_out=killed or run.deadline_hit, truncated=run.truncated,
                          egress_denied=self.egress.denied_since(egress_id, egress_mark)
                          if egress_id and egress_mark else (),
                          new_files=min(run.new_files, NEW_FILES_MAX)
                          if new_files_in and run.new_files is not None else None)

    def cancel_exec(self, sandbox_id: str, ref: str) -> bool:
        """Kill a running exec's whole process tree, including what left its process
        group (`setsid`) since it started, sparing the container's init and other live
        execs (docker_reap, as after a timeout). False when it had already ended; raises
        Unsupported where the engine's processes cannot be reached from this host."""
        if not docker_reap.available(self.settings.host):
            raise Unsupported("stopping a running command needs the Docker engine on this host")
        if ref.startswith(AGENT_REF):
            return self._cancel_agent_run(sandbox_id, ref)
        exec_id, _, since = ref.partition(":")
        info = self._started_exec(exec_id)
        if not info.get("Running"):
            return False
        data = self._running_data(sandbox_id)
        # A sweep right at the start can find the exec's process not yet in the
        # container (and nothing of the command to kill): sweep until the exec ends.
        deadline = time.monotonic() + START_WAIT_SEC
        while True:
            self._reap(data, int(since or 0), exec_id)
            with self._errors("exec inspect"):
                running = self.api.exec_inspect(exec_id).get("Running")
            if not running or time.monotonic() > deadline:
                return True
            time.sleep(0.05)


    def _cancel_agent_run(self, sandbox_id: str, ref: str) -> bool:
        """cancel_exec of a run the agent started (`agent:<pid>:<ticks>:<since>`): found
        and ended from the host through the container's cgroup, as any exec."""
        run_ref, _, since = ref.rpartition(":")
        data = self._running_data(sandbox_id)
        if not self._targets(data, run_ref):
            return False
        deadline = time.monotonic() + START_WAIT_SEC
        while True:
            self._reap(data, int(since or 0), run_ref)
            if not self._targets(data, run_ref) or time.monotonic() > deadline:
                return True
            time.sleep(0.05)
