"""A running command's output as transcript events, line by line as it is printed
(issue 27 item 2), not all at once when the command exits.

The exec's reader hands every chunk to `add`, which only splits it into lines under a
lock: it never waits on the database. A thread of its own writes what came in as one
`output` event every FLUSH_SEC (or sooner past FLUSH_LINES lines), so the page and
`GET .../transcript` follow a long `pip install` as it goes. Each line is hostile: its
terminal escapes and control characters are dropped (NUL included), the config's
secrets masked, its length cut at LINE_MAX; past LIVE_MAX characters a command's output
is no longer stored live, and its last lines follow when it ends.
"""

from __future__ import annotations

import re
import threading

from flask import Flask

from app.backends.base import ExecResult
from app.extensions import db
from app.services.skills.installs.events import EventLog

FLUSH_SEC = 0.5
FLUSH_LINES = 50
LINE_MAX = 2000  # characters of one line kept
PARTIAL_MAX = 16 * 1024  # bytes of a line without its end held before it is cut
LIVE_MAX = 64 * 1024  # characters of one command's output stored while it runs
TAIL_LINES = 40
_ESCAPES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def printed(result: ExecResult) -> str:
    """What a finished command printed: stdout, then stderr."""
    return (result.stdout + (("\n" if result.stdout else "") + result.stderr
                             if result.stderr else "")).rstrip("\n")


def clean_line(raw: bytes, mask) -> str:
    """One printed line as a reader sees it: what a carriage return overwrote is gone,
    escapes and control characters dropped, secrets masked, then cut to LINE_MAX."""
    text = raw.decode("utf-8", "replace").rstrip("\r").rsplit("\r", 1)[-1]
    text = mask(_CONTROL.sub("", _ESCAPES.sub("", text)))
    if len(text) > LINE_MAX:
        text = f"{text[:LINE_MAX]} [… {len(text) - LINE_MAX} characters cut]"
    return text


class LiveOutput:
    """Collects one command's output (`add`, from the exec) and stores it as it comes."""

    def __init__(self, app: Flask, events: EventLog):
        self.app, self.events = app, events
        self.lock = threading.Lock()
        self.partial = {1: b"", 2: b""}
        self.skipping = {1: False, 2: False}  # the rest of a cut line is dropped
        self.lines: list[str] = []
        self.received = 0
        self.stored = 0
        self.full = False
        self.wake, self.ended = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._loop, name="skill-output", daemon=True)

    def __enter__(self) -> LiveOutput:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.ended.set()
        self.wake.set()
        self.thread.join(timeout=30)

    def add(self, stream: int, chunk: bytes) -> None:
        with self.lock:
            self.received += len(chunk)
            pieces = (self.partial.get(stream, b"") + chunk).split(b"\n")
            self.partial[stream] = pieces.pop()
            if self.skipping.get(stream):
                if not pieces:  # still inside the line that was cut
                    self.partial[stream] = b""
                    return
                pieces.pop(0)
                self.skipping[stream] = False
            if len(self.partial[stream]) > PARTIAL_MAX:
                pieces.append(self.partial[stream])
                self.partial[stream], self.skipping[stream] = b"", True
            self._keep(pieces)
            if len(self.lines) >= FLUSH_LINES:
                self.wake.set()

    def _keep(self, pieces: list[bytes]) -> None:
        """Caller holds `lock`."""
        for raw in pieces:
            if self.full:
                return
            line = clean_line(raw, self.events.mask)
            self.stored += len(line) + 1
            if self.stored > LIVE_MAX:
                self.full = True
                line = (f"[… more than {LIVE_MAX // 1024} KB of output: the rest is not "
                        "shown as it runs; its last lines follow when it ends]")
            self.lines.append(line)

    def _loop(self) -> None:
        with self.app.app_context():
            try:
                while not self.ended.is_set():
                    self.wake.wait(FLUSH_SEC)
                    self.wake.clear()
                    self.flush()
            finally:
                db.session.remove()

    def flush(self) -> None:
        with self.lock:
            lines, self.lines = self.lines, []
        if lines:
            self.events.output("\n".join(lines))

    def finish(self, result: ExecResult) -> None:
        """After the command (and after `__exit__`): what is left, the tail of output
        past LIVE_MAX, and the exit code, so the transcript says how it ended."""
        with self.lock:
            self._keep([self.partial[s] for s in (1, 2) if self.partial[s]
                        and not self.skipping[s]])
        self.flush()
        lines = printed(result).splitlines()
        if self.received:  # what was stored live stands; past LIVE_MAX, the last lines
            lines = lines[-TAIL_LINES:] if self.full else []
        tail = "".join(clean_line(line.encode(), self.events.mask) + "\n" for line in lines)
        self.events.output(f"{tail}[exit code {result.exit_code}]")
