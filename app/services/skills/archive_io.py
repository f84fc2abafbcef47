"""Bounded reads and copies of archive entries: every read of untrusted bundle bytes is
capped, and every failure is a BundleInvalid whose message quotes the entry safely."""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Callable
from typing import IO

from app.services.skills.limits import MiB
from app.services.skills.manifest import invalid

MAX_HEADER_READ = 16 * MiB  # a tar header (pax) read larger than this is refused
CHUNK = 256 * 1024


class CappedReader:
    """A seekable file whose single reads may not exceed MAX_HEADER_READ (pax header bombs)."""

    def __init__(self, file: IO[bytes]):
        self.file = file

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_HEADER_READ:
            raise invalid("a tar header is larger than allowed")
        return self.file.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        self.file.close()


def opened(opener: Callable[[], IO[bytes]], rel: str):
    try:
        handle = opener()
    except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError, EOFError) as exc:
        raise invalid(f"entry {quote(rel)} cannot be read ({short(exc)})") from None
    if handle is None:
        raise invalid(f"entry {quote(rel)} cannot be read")
    return handle


def copy_bounded(src: IO[bytes], dst: IO[bytes], limit: int, rel: str) -> int:
    copied = 0
    try:
        while chunk := src.read(CHUNK):
            copied += len(chunk)
            if copied > limit:
                raise invalid(f"entry {quote(rel)} holds more bytes than it declares")
            dst.write(chunk)
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as exc:
        raise invalid(f"entry {quote(rel)} is damaged ({short(exc)})") from None
    return copied


def digest(file: IO[bytes]) -> tuple[str, int]:
    import hashlib

    file.seek(0)
    digest, size = hashlib.sha256(), 0
    while chunk := file.read(CHUNK * 4):
        digest.update(chunk)
        size += len(chunk)
    file.seek(0)
    return digest.hexdigest(), size


def read_capped(handle: IO[bytes], limit: int, what: str) -> bytes:
    try:
        data = handle.read(limit + 1)
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as exc:
        raise invalid(f"{what} is damaged ({short(exc)})") from None
    if len(data) > limit:
        raise invalid(f"{what} is larger than {limit // MiB} MiB")
    return data


class BytesReader:
    def __init__(self, data: bytes):
        import io

        self._io = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._io.read(size)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._io.close()


def quote(name: str) -> str:
    """A name for a message: control characters shown escaped, at most 120 characters."""
    return repr(name[:120])


def short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__
