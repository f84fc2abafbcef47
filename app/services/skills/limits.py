"""How large a skill bundle may be: the configured cap, its error, and the upload spool
that refuses to grow past it."""

from __future__ import annotations

import tempfile
from typing import IO

from app.errors import PayloadTooLarge

MiB = 1024 * 1024
# A multipart body's other parts and boundaries, on top of the file it carries: what a
# request may add to a file limit before it is refused as too large.
MULTIPART_SLACK = MiB


class BundleTooLarge(PayloadTooLarge):
    def __init__(self, limit_mb: int):
        super().__init__(f"skill bundle cannot exceed {limit_mb} MB")
        self.limit_mb = limit_mb


def max_bundle_mb(config) -> int:
    """MAX_SKILL_BUNDLE_SIZE_MB (default 256), raised to MAX_FILE_SIZE_MB, capped at 512."""
    wanted = _positive(config.get("MAX_SKILL_BUNDLE_SIZE_MB"), 256)
    floor = _positive(config.get("MAX_FILE_SIZE_MB"), 50)
    return min(max(wanted, floor), 512)


def _positive(value, default: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return number if number > 0 else default


class BoundedSpool:
    """A spooled temp file that refuses (BundleTooLarge) to grow past `limit` bytes.

    Uploads stream into it chunk by chunk, so an oversize body is refused after reading at
    most `limit` bytes of it, and never more than `memory` bytes of it sit in memory.
    """

    def __init__(self, limit: int, limit_mb: int, memory: int = MiB):
        self.file = tempfile.SpooledTemporaryFile(max_size=memory)  # noqa: SIM115 (closed by owner)
        self.limit, self.limit_mb, self.size = limit, limit_mb, 0

    def write(self, data: bytes) -> int:
        if self.size + len(data) > self.limit:
            raise BundleTooLarge(self.limit_mb)
        self.size += len(data)
        return self.file.write(data)

    def fill(self, stream: IO[bytes], chunk: int = 64 * 1024) -> BoundedSpool:
        while data := stream.read(chunk):
            self.write(data)
        self.file.seek(0)
        return self

    def __getattr__(self, name: str):  # read, seek, tell, close, ... of the spool
        return getattr(self.file, name)
