"""A session's files (issue 26 item 3): list, download, upload and delete under
/workspace in the session's own sandbox, with the session's own rights.

Every operation acts as the sandbox's unprivileged user and starts with a look inside the
sandbox that resolves the path (`realpath`): a path whose links lead out of /workspace
is refused, and what is read or deleted is the resolved path, so no link is followed
afterwards. Uploads go to /workspace/input (or a folder under it); a name already taken
by a link or a folder is refused. Nothing here creates a sandbox: a session without one
answers `sandbox_not_bound`. Uploads, downloads and deletes are in the activity log
(names and sizes, never content).
"""

from __future__ import annotations

import io
import posixpath
import shlex
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from flask import current_app

from app.backends.base import Backend, SandboxPathNotFound
from app.errors import AppError, BadRequest, Conflict, NotFound, PayloadTooLarge, ValidationFailed
from app.extensions import db
from app.models import SandboxConfig, SandboxSession, Tenant
from app.services import Actor, audit, capacity
from app.services.sandboxes.provider import backend_for
from app.services.sessions import binding
from app.services.sessions.lifecycle import provider_errors
from app.services.skills.bundles import BIDI, CONTROL
from app.tenancy import owned_or_404

WORKSPACE, INPUT = "/workspace", "/workspace/input"
PATH_MAX = 1024
NAME_MAX = 255
FILE_MAX_BYTES = 64 << 20  # a download, a folder's zip, or one upload request
ZIP_MAX_FILES = 500
UPLOAD_MAX_FILES = 20
LOOK_SEC = 20

# Run as the sandbox user; "$1"... are paths, never interpolated. Exit codes: 3 no such
# path, 5 a link leads out of the allowed root ($2), 6 neither a file nor a folder.
RESOLVE = r"""
p=$(realpath -e -- "$1" 2>/dev/null) || exit 3
case "$p" in "$2"|"$2"/*) ;; *) exit 5 ;; esac
if [ -d "$p" ]; then printf 'd\n0\n%s' "$p"
elif [ -f "$p" ]; then printf 'f\n%s\n%s' "$(stat -c %s -- "$p")" "$p"
else exit 6; fi
"""
# The folder's regular files (links are not followed), relative, one per line.
FIND_FILES = r"""
cd -- "$1" || exit 3
find . -type f -printf '%s %P\n' | head -n "$2"
"""
# Uploads: the folder made and resolved (under $2), then each name ($3...) checked free
# of links and folders. Exit 7: that name is a link or a folder (printed).
PREPARE_UPLOAD = r"""
mkdir -p -- "$1" 2>/dev/null || exit 4
d=$(realpath -e -- "$1" 2>/dev/null) || exit 3
case "$d" in "$2"|"$2"/*) ;; *) exit 5 ;; esac
root=$2; shift 2
for n in "$@"; do
  if [ -L "$d/$n" ] || [ -d "$d/$n" ]; then printf '%s' "$n"; exit 7; fi
done
printf '%s' "$d"
"""
# Listing: kind, size, mtime (epoch seconds) and name of each entry, a line each.
LIST = r"""
cd -- "$1" || exit 3
find . -mindepth 1 -maxdepth 1 -printf '%y\t%s\t%T@\t%P\n' | head -n 2001
"""
LIST_MAX = 2000


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    type: str  # "file", "folder" or "link"
    size: int
    modified: datetime | None


@dataclass(frozen=True)
class Download:
    name: str
    data: bytes
    zipped: bool


class NotBound(Conflict):
    code = "sandbox_not_bound"
    message = ("This session has no sandbox yet: run a command (or start the sandbox) "
               "and its files appear here.")


def workspace_path(raw: object, default: str = WORKSPACE, root: str = WORKSPACE) -> str:
    """An absolute, normalised path under `root` (relative paths are under /workspace),
    or a 400 naming the field `path`."""
    text = default if raw is None or (isinstance(raw, str) and not raw.strip()) else raw
    if not isinstance(text, str) or len(text) > PATH_MAX or CONTROL.search(text):
        raise ValidationFailed.one("path", f"Give a path under {root} (at most {PATH_MAX} "
                                   "characters, no control characters).")
    clean = posixpath.normpath(posixpath.join(WORKSPACE, text.strip()))
    if clean != root and not clean.startswith(root + "/"):
        raise ValidationFailed.one("path", f"Only paths under {root} can be used here.")
    return clean


def upload_name(raw: object) -> str:
    """A file name as a bundle entry's: no folders, control or bidirectional characters."""
    name = posixpath.basename(str(raw or "").replace("\\", "/")).strip()
    if not name or name in (".", "..") or len(name.encode()) > NAME_MAX:
        raise ValidationFailed.one("file", "Each file needs a name of at most 255 bytes.")
    if CONTROL.search(name) or BIDI.search(name):
        raise ValidationFailed.one("file", f"{name!r} has a control or bidirectional "
                                   "character in its name.")
    return name


@contextmanager
def _sandbox(session: SandboxSession, what: str) -> Iterator[tuple[Backend, str, SandboxConfig]]:
    """The session's running sandbox (resumed if paused) for the block; provider failures
    become 503 naming `what` was being done."""
    config = owned_or_404(SandboxConfig, session.sandbox_config_id, session.tenant_id,
                          "No such sandbox config in this workspace.")
    backend = backend_for(config.config, session.sandbox_id, session.traffic_token)
    try:
        with provider_errors(config, what):
            sandbox_id = binding.bound_sandbox(session, backend)
            if sandbox_id is None:
                raise NotBound()
            yield backend, sandbox_id, config
    finally:
        backend.close()


def _transfer(session: SandboxSession):
    """A file transfer's hold: each holds a server thread and up to FILE_MAX_BYTES of
    memory while it runs, so a member and a workspace have only a few at once."""
    cfg = current_app.config
    return capacity.holding(
        capacity.Use("file_transfer", session.tenant_id, session.user_id, session.id),
        (capacity.Limit("file_transfers_per_member", "member",
                        int(cfg["FILE_TRANSFERS_PER_MEMBER"])),
         capacity.Limit("file_transfers_per_workspace", "workspace",
                        int(cfg["FILE_TRANSFERS_PER_WORKSPACE"]))),
        "file transfers", "wait for one to finish.")


def _look(backend: Backend, sandbox_id: str, script: str, *args: str) -> tuple[int, str]:
    command = " ".join(["sh", "-c", shlex.quote(script), "sh", *map(shlex.quote, args)])
    result = backend.exec(sandbox_id, command, timeout_sec=LOOK_SEC, output_limit=1 << 20)
    return result.exit_code, result.stdout


@dataclass(frozen=True)
class _Found:
    kind: str  # "d" or "f"
    size: int  # a file's; 0 for a folder
    path: str  # its links resolved


def _resolve(backend: Backend, sandbox_id: str, path: str, root: str = WORKSPACE) -> _Found:
    """An existing path, its links resolved (refused when they lead out of `root`)."""
    code, out = _look(backend, sandbox_id, RESOLVE, path, root)
    _refuse(code, path, root)
    kind, size, resolved = (out.split("\n", 2) + ["", ""])[:3]
    return _Found(kind, int(size) if size.isdigit() else 0, resolved)


def _refuse(code: int, path: str, root: str) -> None:
    if code == 3:
        raise NotFound(f"There is no {path} in this session's sandbox.")
    if code == 5:
        raise BadRequest(f"{path} leads outside {root} through a link, so it is not shown "
                         "or changed here.", code="path_outside_workspace")
    if code == 6:
        raise BadRequest(f"{path} is neither a file nor a folder.")
    if code != 0:
        raise BadRequest(f"{path} could not be read in the sandbox.")


def list_files(session: SandboxSession, raw: object) -> tuple[str, list[Entry]]:
    path = workspace_path(raw)
    with _sandbox(session, "listing the session's files") as (backend, sandbox_id, _):
        found = _resolve(backend, sandbox_id, path)
        if found.kind != "d":
            raise BadRequest(f"{path} is a file; download it instead.")
        code, out = _look(backend, sandbox_id, LIST, found.path)
        _refuse(code, path, WORKSPACE)
    entries = []
    for line in out.splitlines()[:LIST_MAX]:
        kind, size, mtime, name = (line.split("\t", 3) + ["", "", "", ""])[:4]
        if not name:
            continue
        entries.append(Entry(name=name, path=posixpath.join(path, name),
                             type={"d": "folder", "l": "link"}.get(kind, "file"),
                             size=int(size) if size.isdigit() else 0,
                             modified=_time(mtime)))
    entries.sort(key=lambda e: (e.type != "folder", e.name.lower()))
    return path, entries


def _time(raw: str) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(raw), UTC)
    except ValueError:
        return None


def download(tenant: Tenant, actor: Actor, session: SandboxSession, raw: object) -> Download:
    """A file byte for byte, or a folder as a zip of its regular files; at most
    FILE_MAX_BYTES either way."""
    path = workspace_path(raw)
    with _transfer(session), \
            _sandbox(session, "downloading from the session's sandbox") as (backend, sid, _):
        found = _resolve(backend, sid, path)
        if found.kind == "f":
            if found.size > FILE_MAX_BYTES:  # refused before anything is read
                raise _too_large(path)
            result = Download(posixpath.basename(path) or "file",
                              _read(backend, sid, found.path, path), zipped=False)
        else:
            result = Download(f"{posixpath.basename(path) or 'workspace'}.zip",
                              _zip(backend, sid, found.path, path), zipped=True)
    audit.record(tenant, actor, "session_file.downloaded", "session", session.id,
                 {"path": path, "size": len(result.data), "zipped": result.zipped})
    db.session.commit()
    return result


def _read(backend: Backend, sandbox_id: str, resolved: str, shown: str) -> bytes:
    try:
        data = backend.read_file(sandbox_id, resolved)
    except SandboxPathNotFound:
        raise NotFound(f"There is no {shown} in this session's sandbox.") from None
    if len(data) > FILE_MAX_BYTES:  # it grew since its size was read
        raise _too_large(shown)
    return data


def _too_large(path: str) -> AppError:
    return PayloadTooLarge(f"{path} is larger than {FILE_MAX_BYTES >> 20} MiB, the most a "
                           "download may be here; copy it out with a command instead.")


def _zip(backend: Backend, sandbox_id: str, resolved: str, shown: str) -> bytes:
    code, out = _look(backend, sandbox_id, FIND_FILES, resolved, str(ZIP_MAX_FILES + 1))
    _refuse(code, shown, WORKSPACE)
    files = [line.split(" ", 1) for line in out.splitlines() if " " in line]
    if len(files) > ZIP_MAX_FILES:
        raise PayloadTooLarge(f"{shown} holds more than {ZIP_MAX_FILES} files, the most a "
                              "folder download may hold; download a folder inside it.")
    if sum(int(size) for size, _ in files if size.isdigit()) > FILE_MAX_BYTES:
        raise _too_large(shown)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for _, rel in sorted(files, key=lambda f: f[1]):
            data = _read(backend, sandbox_id, posixpath.join(resolved, rel),
                         posixpath.join(shown, rel))
            archive.writestr(rel, data)
            if buffer.tell() > FILE_MAX_BYTES:
                raise _too_large(shown)
    return buffer.getvalue()


def upload(tenant: Tenant, actor: Actor, session: SandboxSession, raw_dir: object,
           files: list[tuple[str, bytes]]) -> list[Entry]:
    """Each (name, content) written into the folder (under /workspace/input), owned by
    the sandbox's user; all names are checked before anything is written."""
    folder = workspace_path(raw_dir, default=INPUT, root=INPUT)
    if not files:
        raise ValidationFailed.one("file", "Choose at least one file to upload.")
    if len(files) > UPLOAD_MAX_FILES:
        raise ValidationFailed.one("file", f"At most {UPLOAD_MAX_FILES} files at once.")
    named = [(upload_name(name), data) for name, data in files]
    if len({name for name, _ in named}) != len(named):
        raise ValidationFailed.one("file", "Two of the files have the same name.")
    if sum(len(data) for _, data in named) > FILE_MAX_BYTES:
        raise _too_large("the upload")
    with _transfer(session), \
            _sandbox(session, "uploading into the session's sandbox") as (backend, sandbox_id, _):
        code, out = _look(backend, sandbox_id, PREPARE_UPLOAD, folder, INPUT,
                          *(name for name, _ in named))
        if code == 7:
            raise ValidationFailed.one("file", f"{posixpath.join(folder, out)} is a folder "
                                       "or a link; choose another name.")
        _refuse(code, folder, INPUT)
        for name, data in named:
            backend.write_file(sandbox_id, posixpath.join(out, name), data)
    entries = [Entry(name=name, path=posixpath.join(folder, name), type="file",
                     size=len(data), modified=None) for name, data in named]
    for entry in entries:
        audit.record(tenant, actor, "session_file.uploaded", "session", session.id,
                     {"path": entry.path, "size": entry.size})
    db.session.commit()
    return entries


def delete(tenant: Tenant, actor: Actor, session: SandboxSession, raw: object) -> str:
    """Delete a file or folder under /workspace (a link itself, never what it points to)."""
    path = workspace_path(raw)
    if path == WORKSPACE:
        raise ValidationFailed.one("path", "The workspace folder itself cannot be deleted.")
    parent, name = posixpath.split(path)
    with _sandbox(session, "deleting from the session's sandbox") as (backend, sandbox_id, _):
        target = posixpath.join(_resolve(backend, sandbox_id, parent).path, name)
        code, _ = _look(backend, sandbox_id, '[ -e "$1" ] || [ -L "$1" ] || exit 3', target)
        _refuse(code, path, WORKSPACE)
        backend.remove(sandbox_id, target)
    audit.record(tenant, actor, "session_file.deleted", "session", session.id, {"path": path})
    db.session.commit()
    return path
