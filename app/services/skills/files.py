"""Browsing a stored bundle (reference 6.5): list its files, open one of them.

Reads the normalised zip from the blob store, never a sandbox. Text is capped at 1 MiB
(`truncated`), images are inlined as base64 up to 2 MiB, anything with a NUL byte or
invalid UTF-8 is `binary` with no content. Files are read in chunks; at most the text
cap (or the image cap) is ever held in memory.
"""

from __future__ import annotations

import base64
import codecs
import posixpath
import zipfile
from typing import IO, Any

from app.errors import BadRequest, NotFound

MiB = 1024 * 1024
TEXT_LIMIT = 1 * MiB
IMAGE_LIMIT = 2 * MiB
CHUNK = 64 * 1024
IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
          ".webp": "image/webp", ".bmp": "image/bmp", ".ico": "image/x-icon",
          ".svg": "image/svg+xml"}
DEFAULT_PATH = "SKILL.md"


def safe_path(raw: str | None) -> str:
    """A relative path inside the bundle, or 400: no backslash, not absolute, no `..`."""
    text = (raw or "").strip() or DEFAULT_PATH
    if "\\" in text or text.startswith("/") or ".." in text.split("/") or "\x00" in text:
        raise BadRequest(f"invalid skill file path: {text[:200]!r}")
    clean = posixpath.normpath(text)
    if clean in (".", "..") or clean.startswith("../"):
        raise BadRequest(f"invalid skill file path: {text[:200]!r}")
    return clean


def list_files(archive: IO[bytes]) -> list[dict[str, Any]]:
    with zipfile.ZipFile(archive) as bundle:
        return [{"path": info.filename, "size": info.file_size}
                for info in bundle.infolist() if not info.is_dir()]


def read_file(archive: IO[bytes], raw_path: str | None) -> dict[str, Any]:
    path = safe_path(raw_path)
    with zipfile.ZipFile(archive) as bundle:
        try:
            info = bundle.getinfo(path)
        except KeyError:
            raise NotFound("skill file not found") from None
        if info.is_dir():
            raise NotFound("skill file not found")
        with bundle.open(info) as handle:
            return _content(path, info.file_size, handle)


def _content(path: str, size: int, handle: IO[bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {"path": path, "size": size, "encoding": "utf-8", "content": "",
                           "media_type": "", "truncated": False, "binary": False}
    extension = posixpath.splitext(path)[1].lower()
    if extension in IMAGES:
        out["media_type"] = IMAGES[extension]
        if size > IMAGE_LIMIT:
            return {**out, "encoding": "binary", "binary": True}
        data = handle.read(IMAGE_LIMIT + 1)[:IMAGE_LIMIT]
        return {**out, "encoding": "base64", "content": base64.b64encode(data).decode()}
    text, binary = _text_prefix(handle)
    if binary:
        return {**out, "encoding": "binary", "binary": True}
    if extension:
        out["media_type"] = "text/markdown" if extension in (".md", ".markdown") else "text/plain"
    return {**out, "content": text, "truncated": size > TEXT_LIMIT}


def _text_prefix(handle: IO[bytes]) -> tuple[str, bool]:
    """The first TEXT_LIMIT bytes as text, and whether the whole file is binary (a NUL byte
    or invalid UTF-8 anywhere). Reads the whole file in chunks, keeps only the prefix."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    kept: list[str] = []
    budget = TEXT_LIMIT
    try:
        while chunk := handle.read(CHUNK):
            if b"\x00" in chunk:
                return "", True
            text = decoder.decode(chunk)
            if budget > 0:
                piece = chunk[:budget]
                kept.append(piece.decode("utf-8", "ignore") if len(piece) < len(chunk)
                            else text)
                budget -= len(piece)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return "", True
    return "".join(kept), False
