"""Files in an E2B or Cube sandbox, through envd's filesystem API (`files.*`).

envd does file operations as root and only chowns the result to the requested user, so
a user check runs first (as that user, through a command), as the Docker backend does:
a sandbox user cannot make us touch what it could not touch itself.

A mixin of E2BCompatible (it uses the backend's `_handle`, `_errors`, `exec` and
`settings`).
"""

from __future__ import annotations

import posixpath
import shlex
import uuid

from e2b import CommandExitException, Sandbox, SandboxNotRunningException, TimeoutException
from e2b.sandbox.filesystem.filesystem import FileType

from app.backends.base import BackendError, BackendTimeout, FileEntry, SandboxPathNotFound
from app.backends.sandbox_paths import (
    CHECK_READ,
    PREPARE_WRITE,
    abs_path,
    file_path,
    removable_path,
)

# Checks run as the requesting user before envd (root) acts (see sandbox_paths).
CHECK_LIST = r"""
[ -e "$1" ] || exit 3
[ -d "$1" ] || { echo "$1: not a directory" >&2; exit 1; }
[ -r "$1" ] && [ -x "$1" ] || { echo "$1: permission denied" >&2; exit 1; }
"""



class E2BFiles:
    """The filesystem half of the E2B-compatible backends, checked as the requesting user."""

    def _check(self, handle: Sandbox, tokens: tuple[str, ...], script: str, *args: str,
               user: str | None, what: str) -> None:
        """A check script as `user`; exit 3 means "no such path"."""
        line = " ".join(["sh", "-c", shlex.quote(script), "sh", *map(shlex.quote, args)])
        with self._errors(what, tokens):
            try:
                handle.commands.run(line, user=user, cwd="/",
                                    timeout=self.settings.http_timeout_sec)
                return
            except CommandExitException as exc:
                code, detail = exc.exit_code, (exc.stderr or exc.stdout or "").strip()
            except SandboxNotRunningException:
                raise
            except TimeoutException:
                raise BackendTimeout(f"{what} did not finish in time") from None
        if code == 3:
            raise SandboxPathNotFound(f"{what}: {args[0]}: no such file or directory")
        lines = detail.splitlines()
        raise BackendError(f"{what} failed: {lines[-1] if lines else code}")

    def write_file(self, sandbox_id: str, path: str, data: bytes, *,
                   user: str | None = None) -> None:
        full, parent, _ = file_path(path)
        handle, tokens = self._handle(sandbox_id)
        self._check(handle, tokens, PREPARE_WRITE, parent, full, user=user, what="write file")
        with self._errors("write file", tokens):
            handle.files.write(full, bytes(data), user=user)

    def read_file(self, sandbox_id: str, path: str, *, user: str | None = None) -> bytes:
        full = abs_path(path)
        handle, tokens = self._handle(sandbox_id)
        self._check(handle, tokens, CHECK_READ, full, user=user, what="read file")
        with self._errors("read file", tokens):
            return bytes(handle.files.read(full, format="bytes", user=user))

    def list_dir(self, sandbox_id: str, path: str, *,
                 user: str | None = None) -> list[FileEntry]:
        full = abs_path(path)
        handle, tokens = self._handle(sandbox_id)
        self._check(handle, tokens, CHECK_LIST, full, user=user, what="list directory")
        with self._errors("list directory", tokens):
            entries = handle.files.list(full, depth=1, user=user)
        return sorted((FileEntry(name=e.name, path=posixpath.join(full, e.name),
                                 is_dir=e.type == FileType.DIR, size=int(e.size or 0))
                       for e in entries), key=lambda entry: entry.name)

    def make_dir(self, sandbox_id: str, path: str, *, user: str | None = None) -> None:
        handle, tokens = self._handle(sandbox_id)
        self._check(handle, tokens, 'mkdir -p -- "$1"', abs_path(path), user=user,
                    what="make dir")

    def remove(self, sandbox_id: str, path: str, *, user: str | None = None) -> None:
        full = removable_path(path)
        handle, tokens = self._handle(sandbox_id)
        self._check(handle, tokens, 'rm -rf -- "$1"', full, user=user, what="remove")

    def extract_tar(self, sandbox_id: str, directory: str, data: bytes) -> None:
        """Upload the tar as one file, unpack it as root into `directory`, delete it."""
        full = abs_path(directory)
        archive = f"/tmp/sandlot-seed-{uuid.uuid4().hex}.tar"
        self.write_file(sandbox_id, archive, data, user="root")
        script = (f"tar -xf {archive} -C {shlex.quote(full)} --no-same-owner; rc=$?; "
                  f"rm -f {archive}; exit $rc")
        result = self.exec(sandbox_id, script, user="root", cwd="/",
                           timeout_sec=self.settings.http_timeout_sec)
        if result.exit_code != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise BackendError(f"extract failed: {detail[-1] if detail else result.exit_code}")
