"""What a run keeps of its output, and the hooks an exec reports to while it runs.

Each stream is kept as its first and last RUN_OUTPUT_CAP // 2 bytes (64 KiB in all per
stream), so a command that prints gigabytes stores 128 KiB, and both how it started and
how it ended stay readable. Values of the resolved environment are masked before
anything is stored: the run history is at rest, unlike the synchronous answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from app.security.redaction import MASK

RUN_OUTPUT_CAP = 64 * 1024
MIN_SECRET_LEN = 4  # shorter values ("1", "yes") would mask ordinary output


class Capture:
    """One stream's head and tail, and how many bytes went by in all."""

    def __init__(self, cap: int = RUN_OUTPUT_CAP):
        self.half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[:-self.half]

    def replace(self, data: bytes, total: int) -> None:
        """Start over from a finished exec's own (more complete) copy of the stream."""
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self.add(data)
        self.total = max(total, self.total)

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self, secrets: tuple[str, ...] = ()) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        gap = f"\n[... {self.omitted} bytes omitted ...]\n" if self.omitted > 0 else ""
        return mask(head + gap + tail, secrets)


def mask(text: str, secrets: tuple[str, ...]) -> str:
    for value in sorted(secrets, key=len, reverse=True):
        if len(value) >= MIN_SECRET_LEN:
            text = text.replace(value, MASK)
    return text


@dataclass
class LiveHooks:
    """Passed to an exec that should report while it runs: `on_output(stream, chunk)`
    (1 stdout, 2 stderr), `on_started(ref)` with the provider's handle for cancelling,
    and `secrets`, which the exec fills with the resolved environment's values so the
    run can mask them (they are never stored)."""

    on_output: Callable[[int, bytes], None]
    on_started: Callable[[str], None]
    secrets: tuple[str, ...] = field(default=())
