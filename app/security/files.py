"""Files only the server's own user may read: keys, the SQLite database, state and logs.

Created with their final mode (never world-readable for a moment), and tightened when they
already exist with looser modes from an earlier version or a permissive umask.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can enter (created if missing)."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def open_private(path: Path, mode: str = "a") -> IO:
    """Open `path` for writing ("a" or "w"), creating it 0600 and tightening it if it exists."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, mode)


def write_private(path: Path, text: str) -> None:
    with open_private(path, "w") as handle:
        handle.write(text)


def touch_private(path: Path) -> None:
    """Create `path` empty and 0600 if missing (so whatever opens it next inherits no
    looser mode: SQLite gives its journal and WAL the database file's mode), else tighten."""
    open_private(path, "a").close()


def tighten_tree(root: Path) -> list[Path]:
    """Make every directory under `root` 0700 and every file 0600; what was changed."""
    changed: list[Path] = []
    if not root.is_dir() or root.is_symlink():
        return changed
    for current, dirs, files in os.walk(root):
        folder = Path(current)
        changed += _tighten(folder, DIR_MODE)
        for name in files:
            changed += _tighten(folder / name, FILE_MODE)
        dirs[:] = [d for d in dirs if not (folder / d).is_symlink()]
    return changed


def _tighten(path: Path, wanted: int) -> list[Path]:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or stat.S_IMODE(info.st_mode) & ~wanted == 0:
        return []
    os.chmod(path, stat.S_IMODE(info.st_mode) & wanted)
    return [path]
