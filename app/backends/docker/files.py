"""Docker sandbox filesystem: writes and reads through the engine's archive API, listing,
mkdir and remove through exec, all checked as the requesting user.

`put_archive`/`get_archive` act with the engine's rights (like `docker cp`), so each is
preceded by a check run as `user` (the parent directory is created and must be
writable; the file must be readable): a sandbox user cannot make us touch what it
could not touch itself. Written files are owned by `user`. Users are `sandbox`
(uid 1000, the default) and `root`.
"""

from __future__ import annotations

import posixpath
import tarfile

from app.backends.base import (
    BackendError,
    BackendTimeout,
    FileEntry,
    SandboxNotFound,
    SandboxPathNotFound,
)
from app.backends.docker import io
from app.backends.sandbox_paths import (
    CHECK_READ,
    PREPARE_WRITE,
    abs_path,
    file_path,
    removable_path,
)

SANDBOX_USER = "sandbox"
USER_IDS = {"sandbox": 1000, "root": 0}
FILE_OP_LIMIT = 16 << 20
MAX_READ_BYTES = 64 << 20
MAX_SYMLINK_HOPS = 8

# Shell helpers run as the requested user; "$1"/"$2" are paths, never interpolated.
LIST_SCRIPT = r"""
[ -e "$1" ] || exit 3
cd -- "$1" 2>/dev/null || { echo "$1: not a readable directory" >&2; exit 4; }
for f in * .[!.]* ..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  if [ -d "$f" ]; then printf 'd\0%s\0%s\0' 0 "$f"
  else printf 'f\0%s\0%s\0' "$(stat -c %s -- "$f" 2>/dev/null || echo 0)" "$f"; fi
done
"""


def user_name(user: str | None) -> str:
    """The exec user: `sandbox` unless root is asked for; no other users exist."""
    name = user or SANDBOX_USER
    if name not in USER_IDS:
        raise BackendError(f"unknown sandbox user {name!r} (use sandbox or root)")
    return name


class DockerFiles:
    """Filesystem half of DockerBackend (a mixin: it uses the backend's `api`, `_errors`,
    `_inspect`, `_running`, `_run` and `settings`)."""

    def _shell(self, sandbox_id: str, script: str, *args: str, user: str | None,
               what: str) -> io.RawRun:
        """A helper script as `user`; exit 3 means "no such path"."""
        run = self._run(self._running(sandbox_id), ["sh", "-c", script, "sh", *args],
                        user=user_name(user), cwd="/", env=None,
                        deadline_sec=self.settings.http_timeout_sec, limit=FILE_OP_LIMIT)
        if run.deadline_hit:
            raise BackendTimeout(f"{what} did not finish in time")
        if run.exit_code == 3:
            raise SandboxPathNotFound(f"{what}: {args[0]}: no such file or directory")
        if run.exit_code != 0:
            # The engine reports its own failures (bad user, cwd) on stdout.
            detail = (run.stderr or run.stdout).decode("utf-8", "replace").strip().splitlines()
            raise BackendError(f"{what} failed: {detail[-1] if detail else run.exit_code}")
        return run

    def write_file(self, sandbox_id: str, path: str, data: bytes, *,
                   user: str | None = None) -> None:
        full, parent, name = file_path(path)
        who = user_name(user)
        self._shell(sandbox_id, PREPARE_WRITE, parent, full, user=who, what="write file")
        archive = io.tar_one_file(name, data, USER_IDS[who])
        with self._errors("write file"):
            self.api.put_archive(self._running(sandbox_id), parent, archive)

    def read_file(self, sandbox_id: str, path: str, *, user: str | None = None) -> bytes:
        full = abs_path(path)
        for _ in range(MAX_SYMLINK_HOPS):
            # Also keeps get_archive from packing a whole directory tree.
            self._shell(sandbox_id, CHECK_READ, full, user=user, what="read file")
            member, data = self._get_one(sandbox_id, full)
            if not member.issym():
                if data is None:
                    raise BackendError(f"read file failed: {full} is not a regular file")
                return data
            full = posixpath.normpath(posixpath.join(posixpath.dirname(full),
                                                     member.linkname))
        raise BackendError(f"read file failed: too many symlinks at {path}")

    def _get_one(self, sandbox_id: str, full: str) -> tuple[tarfile.TarInfo, bytes | None]:
        container_id = self._inspect(sandbox_id)["Id"]
        try:
            with self._errors("read file"):
                stream, stat = self.api.get_archive(container_id, full)
                if stat.get("size", 0) > MAX_READ_BYTES:
                    raise BackendError(f"read file failed: {full} is larger than "
                                       f"{MAX_READ_BYTES >> 20} MiB")
                archive = b"".join(stream)
        except SandboxNotFound:
            raise SandboxPathNotFound(f"read file: {full}: no such file") from None
        return io.untar_one(archive)

    def list_dir(self, sandbox_id: str, path: str, *,
                 user: str | None = None) -> list[FileEntry]:
        full = abs_path(path)
        run = self._shell(sandbox_id, LIST_SCRIPT, full, user=user, what="list directory")
        if run.truncated:
            raise BackendError(f"list directory failed: {full} has too many entries")
        fields = run.stdout.split(b"\0")[:-1]
        entries = [FileEntry(name=name.decode("utf-8", "replace"),
                             path=posixpath.join(full, name.decode("utf-8", "replace")),
                             is_dir=kind == b"d", size=int(size or 0))
                   for kind, size, name in zip(fields[0::3], fields[1::3], fields[2::3],
                                               strict=True)]
        return sorted(entries, key=lambda entry: entry.name)

    def extract_tar(self, sandbox_id: str, directory: str, data: bytes) -> None:
        """One `put_archive` into `directory` (which must exist): entries keep the tar's
        owners and modes. Only the installer calls this, as root, into a skill directory."""
        full = abs_path(directory)
        self._shell(sandbox_id, '[ -d "$1" ] || exit 3', full, user="root", what="extract")
        with self._errors("extract archive"):
            self.api.put_archive(self._running(sandbox_id), full, data)

    def make_dir(self, sandbox_id: str, path: str, *, user: str | None = None) -> None:
        self._shell(sandbox_id, 'mkdir -p -- "$1"', abs_path(path), user=user, what="make dir")

    def remove(self, sandbox_id: str, path: str, *, user: str | None = None) -> None:
        full = removable_path(path)
        self._shell(sandbox_id, 'rm -rf -- "$1"', full, user=user, what="remove")
