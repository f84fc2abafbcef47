"""The web terminal's shell in an E2B or Cube sandbox (issue 26), through envd's PTY
process API (the SDK's `sandbox.pty`): `bash -i -l` on a pseudo-terminal, its output
streamed by envd, keystrokes sent one request each.

A mixin of E2BCompatible (it uses the backend's `_handle` and `_errors`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from e2b import NotFoundException, SandboxNotFoundException
from e2b.sandbox.commands.command_handle import PtySize

from app.backends.base import BackendError, Terminal
from app.backends.sandbox_paths import WORKDIR

log = logging.getLogger(__name__)

# Output read from envd but not yet taken by the relay. When it is full the reader
# stops reading, and the stream (and in the end the shell's writes) waits.
BUFFER_BYTES = 256 * 1024
READER_JOIN_SEC = 5.0


class E2BTerminal:
    """`open_terminal` of the E2B-compatible backends."""

    def open_terminal(self, sandbox_id: str, *, user: str | None = None,
                      cwd: str | None = None, env: dict[str, str] | None = None,
                      cols: int = 80, rows: int = 24) -> Terminal:
        """A login shell (the SDK's `bash -i -l`, TERM=xterm-256color) on a PTY of
        `cols` x `rows`, as `user` (the template's user by default) in `cwd`."""
        handle, tokens = self._handle(sandbox_id)
        secrets = (*tokens, *(env or {}).values())

        def errors() -> AbstractContextManager[None]:
            return self._errors("terminal", secrets)

        with errors():
            command = handle.pty.create(
                size=_size(cols, rows), user=user, cwd=cwd or WORKDIR,
                envs=dict(env or {}) or None, timeout=0)
        return E2BPty(handle.pty, command, errors)


def _size(cols: int, rows: int) -> PtySize:
    return PtySize(rows=max(1, int(rows)), cols=max(1, int(cols)))


class E2BPty:
    """One open shell: a reader thread moves envd's output into a bounded buffer."""

    def __init__(self, pty: Any, command: Any,
                 errors: Callable[[], AbstractContextManager[None]]):
        self._pty = pty
        self._command = command
        self._pid = command.pid
        self._errors = errors
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._ended = False  # the shell's stream is over: nothing more will come
        self._closed = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._pump, daemon=True,
                                        name=f"e2b-pty-{self._pid}")
        self._reader.start()

    # -- the reader thread ----------------------------------------------------------------

    def _pump(self) -> None:
        try:
            with self._errors():
                for _, _, chunk in self._command:
                    if chunk and not self._offer(chunk):
                        break  # closed
        except BackendError as exc:
            log.info("terminal stream of pty %s ended: %s", self._pid, exc.reason)
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()
            self._command.disconnect()

    def _offer(self, chunk: bytes) -> bool:
        """Buffer a chunk, waiting while the buffer is full; False once closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._buffered < BUFFER_BYTES)
            if self._closed:
                return False
            self._chunks.append(chunk)
            self._buffered += len(chunk)
            self._cond.notify_all()
            return True

    # -- Terminal -------------------------------------------------------------------------

    def read(self, timeout: float) -> bytes | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._chunks or self._ended or self._closed,
                                       max(0.0, timeout)):
                return None
            if self._closed or not self._chunks:
                return b""
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            self._cond.notify_all()
            return data

    def write(self, data: bytes) -> None:
        if data and self._live():
            self._call(self._pty.send_stdin, self._pid, bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        if self._live():
            self._call(self._pty.resize, self._pid, _size(cols, rows))

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._chunks.clear()
            self._buffered = 0
            self._cond.notify_all()
        # SIGKILL to the shell's process group (a stream that broke may have left it
        # running); one already gone is success.
        self._call(self._pty.kill, self._pid)
        self._reader.join(READER_JOIN_SEC)

    def _live(self) -> bool:
        with self._cond:
            return not (self._closed or self._ended)

    def _call(self, method: Callable[..., Any], *args: Any) -> None:
        """One envd request; a shell that has ended is no error (reads say so), even
        before the reader has come to its end."""
        try:
            with self._errors():
                try:
                    method(*args)
                except NotFoundException as exc:
                    if isinstance(exc, SandboxNotFoundException):
                        raise
                    return  # envd has no such process (any more)
        except BackendError:
            with self._cond:
                if not self._ended:
                    raise
