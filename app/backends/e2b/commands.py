"""Commands in an E2B or Cube sandbox, through envd's process API (`commands.run`).

A mixin of E2BCompatible (it uses the backend's `_handle` and `_errors`).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

from e2b import CommandExitException, SandboxNotRunningException, TimeoutException

from app.backends.base import NEW_FILES_MAX, ExecResult, new_files_script
from app.backends.e2b import io
from app.backends.sandbox_paths import WORKDIR


class E2BCommands:
    """`exec` and `cancel_exec` of the E2B-compatible backends."""

    def exec(self, sandbox_id: str, command: str, *, user: str | None = None,
             cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: int = 60, output_limit: int = 1 << 20,
             on_output: Callable[[int, bytes], None] | None = None,
             on_started: Callable[[str], None] | None = None,
             new_files_in: str | None = None) -> ExecResult:
        """Run `command` (envd runs it with `bash -l -c`), killed after `timeout_sec`.

        stdout and stderr are each kept up to `output_limit` bytes (truncated=True when
        more was produced). At the deadline the stream ends, the process is killed
        (SIGKILL) and the result is timed_out with exit code 137. `on_output(stream,
        chunk)` sees the output live; `on_started(ref)` gets the process's id, the handle
        `cancel_exec` takes. With `new_files_in`, a second command afterwards counts the
        regular files under that folder the command created or changed (result.new_files;
        the sandbox's clock is trusted to within a second of ours).
        """
        timeout_sec = timeout_sec if timeout_sec > 0 else 60
        since = time.time() - 1
        handle, tokens = self._handle(sandbox_id)
        secrets = (*tokens, *(env or {}).values())
        out, err = io.Capped(output_limit), io.Capped(output_limit)
        clock = io.Stopwatch()
        timed_out = False
        with self._errors("exec", secrets):
            command_handle = handle.commands.run(
                command, background=True, envs=dict(env or {}) or None, user=user,
                cwd=cwd or WORKDIR, timeout=timeout_sec, retain_output=False)
            if on_started is not None:
                on_started(str(command_handle.pid))
            try:
                exit_code = command_handle.wait(on_stdout=_tee(out, 1, on_output),
                                                on_stderr=_tee(err, 2, on_output)).exit_code
            except CommandExitException as exc:
                exit_code = exc.exit_code
            except SandboxNotRunningException:
                raise
            except TimeoutException:
                timed_out = True
                exit_code = 137
                command_handle.kill()
        duration_ms = int(clock.elapsed * 1000)
        new_files = None
        if new_files_in and not timed_out:
            new_files = self._new_files(handle, secrets, new_files_in, since, user)
        return ExecResult(stdout=out.text(), stderr=err.text(), exit_code=exit_code,
                          duration_ms=duration_ms, timed_out=timed_out,
                          truncated=out.truncated or err.truncated, new_files=new_files)

    def _new_files(self, handle, secrets: tuple[str, ...], folder: str, since: float,
                   user: str | None) -> int | None:
        script = f"sh -c {shlex.quote(new_files_script(shlex.quote(folder), f'{since:.6f}'))}"
        with self._errors("count new files", secrets):
            try:
                found = handle.commands.run(script, user=user, timeout=10)
            except CommandExitException:
                return None
        count = found.stdout.strip()
        return min(int(count), NEW_FILES_MAX) if count.isdigit() else None

    def cancel_exec(self, sandbox_id: str, ref: str) -> bool:
        """SIGKILL a running command; envd signals its whole process group. False when it
        had already ended."""
        handle, tokens = self._handle(sandbox_id)
        with self._errors("stop command", tokens):
            return bool(handle.commands.kill(int(ref)))


def _tee(capped: io.Capped, stream: int,
         sink: Callable[[int, bytes], None] | None) -> Callable[[str], None]:
    """Keep a chunk and, for a live view, pass it on as bytes."""
    if sink is None:
        return capped.add

    def add(chunk: str) -> None:
        capped.add(chunk)
        sink(stream, chunk.encode())
    return add
