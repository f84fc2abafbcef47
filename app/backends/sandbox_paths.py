"""What every backend shares about paths and ownership inside a sandbox."""

from __future__ import annotations

import posixpath

from app.backends.base import METADATA_PREFIX, BackendError

WORKDIR = "/workspace"
OUTPUT_DIR = "/workspace/output"  # what a command leaves for the member (reference 9.3)

# Checks run as the requesting user before a file operation; "$1"/"$2" are paths, never
# interpolated. Exit 3 means "no such path".
PREPARE_WRITE = r"""
mkdir -p -- "$1" || exit 1
[ -w "$1" ] || { echo "$1: permission denied" >&2; exit 1; }
[ ! -d "$2" ] || { echo "$2: is a directory" >&2; exit 1; }
[ ! -e "$2" ] || [ -w "$2" ] || { echo "$2: permission denied" >&2; exit 1; }
"""
CHECK_READ = r"""
[ -e "$1" ] || exit 3
[ ! -d "$1" ] || { echo "$1: is a directory" >&2; exit 1; }
[ -r "$1" ] || { echo "$1: permission denied" >&2; exit 1; }
"""


def abs_path(path: str) -> str:
    """Relative paths are relative to the working dir."""
    if not path or "\0" in path:
        raise BackendError("invalid path")
    return posixpath.normpath(posixpath.join(WORKDIR, path))


def file_path(path: str) -> tuple[str, str, str]:
    """Where `write_file` writes: the absolute path, its directory and its name."""
    full = abs_path(path)
    parent, name = posixpath.split(full)
    if not name:
        raise BackendError("write_file needs a file path")
    return full, parent, name


def removable_path(path: str) -> str:
    """The absolute path `remove` deletes; never the root."""
    full = abs_path(path)
    if full == "/":
        raise BackendError("refusing to remove /")
    return full


def is_ours(metadata: dict[str, str] | None) -> bool:
    """Only sandboxes carrying our sandlot_* metadata are ours to see or touch."""
    return any(key.startswith(METADATA_PREFIX) for key in (metadata or {}))
