"""The egress log on disk: `<state>/egress-log/<id>.jsonl` per sandbox, one JSON object
per line (a connection the gateway decided, a name the resolver refused), appended in
batches by those two daemons, for root's eyes only (0600).

Two readers:

- a command's result: what was refused between a `mark` taken before it and now
  (`since`, `denied`);
- the app's ingester, `collect`: every complete line not taken yet, with a cursor per
  file (by inode, so a renamed file is still followed) under a lock, so several app
  processes on one host take each line once. A file taken whole and past ROTATE_BYTES
  is renamed `.taken` and removed at a later pass (a batch written in the moment of the
  rename lands in the renamed file and is still read); a file whose sandbox is gone is
  removed once taken whole.

A line's fields: t (epoch seconds), meta (the sandbox's labels: workspace, config,
session), protocol (tls, http, tcp, dns), host (the name presented, or None), address,
port, verdict (allowed, denied, failed), rule, sent, received (bytes), ms.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FILE_MAX = 16 << 20  # a sandbox's current file beyond this drops new lines
ROTATE_BYTES = 1 << 20
KEEP_TAKEN_SEC = 5.0  # a renamed file is removed this long after its last write
KEEP_GONE_SEC = 60.0  # a gone sandbox's file is removed this long after its last write
CURSOR = ".cursor.json"
LOCK = ".collect.lock"


def folder(state_dir: Path) -> Path:
    return state_dir / "egress-log"


def _current(state_dir: Path, net_id: str) -> Path:
    return folder(state_dir) / f"{net_id}.jsonl"


def append(state_dir: Path, net_id: str, lines: list[str]) -> bool:
    """One write of whole lines to the sandbox's file; False when it is full."""
    path = _current(state_dir, net_id)
    try:
        if path.stat().st_size > FILE_MAX:
            return False
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, ("\n".join(lines) + "\n").encode())
    finally:
        os.close(fd)
    return True


class Spool:
    """The gateway's batches: lines kept per sandbox until `flush`."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        folder(state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        self.pending: dict[str, list[str]] = {}
        self.dropped = 0

    def add(self, net_id: str, record: dict) -> None:
        self.pending.setdefault(net_id, []).append(json.dumps(record, sort_keys=True))

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for net_id, lines in pending.items():
            if not append(self.state_dir, net_id, lines):
                self.dropped += len(lines)


def _lines(path: Path, offset: int) -> tuple[list[dict], int]:
    """The complete lines after `offset`, and the offset after the last of them."""
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read(FILE_MAX)
    end = data.rfind(b"\n") + 1
    rows = []
    for line in data[:end].splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows, offset + end


# -- a command's window ------------------------------------------------------------------

@dataclass(frozen=True)
class Mark:
    inode: int
    size: int


def mark(state_dir: Path, net_id: str) -> Mark:
    try:
        info = _current(state_dir, net_id).stat()
    except FileNotFoundError:
        return Mark(0, 0)
    return Mark(info.st_ino, info.st_size)


def since(state_dir: Path, net_id: str, start: Mark) -> list[dict]:
    """The lines written for this sandbox after `start`, across a rotation."""
    rows: list[dict] = []
    path = _current(state_dir, net_id)
    try:
        current = path.stat().st_ino
    except FileNotFoundError:
        current = 0
    if start.inode and start.inode != current:  # rotated since: finish the old file
        for taken in folder(state_dir).glob(f"{net_id}.*.taken"):
            try:
                if taken.stat().st_ino == start.inode:
                    rows += _lines(taken, start.size)[0]
            except FileNotFoundError:
                continue
    if current:
        try:
            rows += _lines(path, start.size if start.inode == current else 0)[0]
        except FileNotFoundError:
            pass
    return rows


def denied(rows: list[dict]) -> tuple[dict, ...]:
    """Refused connections as a command's result lists them: per (host, port), a count."""
    counts: dict[tuple[str, int], int] = {}
    for row in rows:
        if row.get("verdict") == "denied":
            key = (str(row.get("host") or row.get("address") or ""), int(row.get("port") or 0))
            counts[key] = counts.get(key, 0) + 1
    return tuple({"host": host, "port": port, "count": count}
                 for (host, port), count in sorted(counts.items()))


# -- the ingester ------------------------------------------------------------------------

def collect(state_dir: Path, store: Callable[[list[dict]], None], limit: int = 5000) -> int:
    """Hand up to about `limit` lines not taken before, oldest files first, to `store`
    (each row gains `egress_id`); the cursor moves only once `store` returned, so a
    failed store takes the same lines again next time. The files of sandboxes that are
    gone (no state file) are removed once taken whole. How many lines were stored."""
    base = folder(state_dir)
    if not base.is_dir():
        return 0
    live = {path.stem for path in (state_dir / "sandboxes").glob("*.json")}
    with open(base / LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cursor_path = base / CURSOR
        try:
            cursor = {int(k): int(v) for k, v in json.loads(cursor_path.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            cursor = {}
        taken: list[dict] = []
        seen: dict[int, int] = {}
        now = time.time()
        files = sorted(list(base.glob("*.taken")) + list(base.glob("*.jsonl")),
                       key=lambda p: p.stat().st_mtime if p.exists() else 0)
        for path in files:
            try:
                info = path.stat()
            except FileNotFoundError:
                continue
            net_id = path.name.split(".", 1)[0]
            offset = cursor.get(info.st_ino, 0)
            # Taken whole and stored by an earlier pass: only then may the file go.
            whole = offset >= info.st_size
            if len(taken) < limit and offset < info.st_size:
                rows, offset = _lines(path, offset)
                for row in rows:
                    row["egress_id"] = net_id
                taken += rows
            seen[info.st_ino] = offset
            idle = now - info.st_mtime
            if whole and path.suffix == ".taken" and idle > KEEP_TAKEN_SEC:
                path.unlink(missing_ok=True)
                seen.pop(info.st_ino, None)
            elif whole and net_id not in live and idle > KEEP_GONE_SEC:
                path.unlink(missing_ok=True)
                seen.pop(info.st_ino, None)
            elif whole and path.suffix == ".jsonl" and info.st_size >= ROTATE_BYTES:
                path.rename(base / f"{net_id}.{int(now * 1000)}.taken")
        if taken:
            store(taken)
        temp = base / f"{CURSOR}.tmp"
        temp.write_text(json.dumps({str(k): v for k, v in seen.items()}))
        temp.replace(cursor_path)
        return len(taken)
