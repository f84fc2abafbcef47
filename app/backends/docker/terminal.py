"""The web terminal on Docker (issue 26): a login shell in an exec with a TTY, relayed
over the exec's hijacked socket (with a TTY the engine sends raw bytes, no stream
headers).

A mixin of DockerBackend (it uses `api`, `_errors`, `_running_data`, `egress`, `settings`
and `cancel_exec`). The shell runs as the sandbox user behind the sandbox's egress rules
like any command. Closing the terminal ends the shell and everything it started (the
same host-side sweep as a cancelled command); an engine that is not on this host can
only hang up, and a shell then ends when it reads the end of its input. A dropped
connection cannot re-attach to the same shell: a new terminal is a new shell.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Any

from app.backends.base import BackendError
from app.backends.docker import reap as docker_reap
from app.backends.docker.egress.manager import egress_id_of
from app.backends.docker.files import user_name
from app.backends.sandbox_paths import WORKDIR

# bash when the image has it (prompt, history, job control), else the POSIX shell.
LOGIN_SHELL = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"
TERMINAL_ENV = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
CHUNK = 64 * 1024


class DockerShell:
    """One exec's PTY (base.Terminal)."""

    def __init__(self, backend: Any, sandbox_id: str, exec_id: str, since: int, sock: Any):
        self._backend, self._sandbox_id = backend, sandbox_id
        self._exec_id, self._since = exec_id, since
        # docker-py hands back a SocketIO over a unix socket, the TLS socket itself
        # over tcp: read and write the socket underneath.
        self._sock: socket.socket = getattr(sock, "_sock", sock)
        self._keep = sock  # it holds the HTTP response that owns the socket
        self._ended = False
        self._closing = threading.Lock()
        self._closed = False

    def read(self, timeout: float) -> bytes | None:
        if self._ended:
            return b""
        try:
            pending = getattr(self._sock, "pending", None)  # TLS: bytes already decrypted
            if not (pending and pending()):
                ready, _, _ = select.select([self._sock], [], [], timeout)
                if not ready:
                    return None
            data = self._sock.recv(CHUNK)
        except (OSError, ValueError):  # closed under us (close() from another thread)
            data = b""
        if not data:
            self._ended = True
        return data

    def write(self, data: bytes) -> None:
        if self._ended or not data:
            return
        try:
            self._sock.sendall(data)
        except OSError:
            self._ended = True

    def resize(self, cols: int, rows: int) -> None:
        if self._ended:
            return
        with contextlib.suppress(Exception):  # the shell may have just ended
            self._backend.api.exec_resize(self._exec_id, height=rows, width=cols)

    def close(self) -> None:
        with self._closing:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._ended = True
        if docker_reap.available(self._backend.settings.host):
            with contextlib.suppress(BackendError):
                self._backend.cancel_exec(self._sandbox_id, f"{self._exec_id}:{self._since}")


class DockerTerminal:
    """`open_terminal` of DockerBackend."""

    def open_terminal(self, sandbox_id: str, *, user: str | None = None,
                      cwd: str | None = None, env: dict[str, str] | None = None,
                      cols: int = 80, rows: int = 24) -> DockerShell:
        data = self._running_data(sandbox_id)
        egress_id = egress_id_of(data)
        if egress_id:
            with self._errors("restore sandbox egress"):
                self.egress.revive(egress_id)
        secrets = tuple((env or {}).values())
        since = docker_reap.now_ticks()
        with self._errors("terminal", secrets):
            exec_id = self.api.exec_create(
                data["Id"], ["sh", "-c", LOGIN_SHELL], stdin=True, tty=True,
                user=user_name(user), workdir=cwd or WORKDIR,
                environment={**TERMINAL_ENV, **(env or {})})["Id"]
            sock = self.api.exec_start(exec_id, tty=True, socket=True)
        shell = DockerShell(self, sandbox_id, exec_id, since, sock)
        shell.resize(cols, rows)
        return shell
