"""Content-addressed blob storage for skill bundles: a local directory, or S3-compatible.

A blob's key is `<namespace>/<sha256>.zip`, so writing the same bytes twice is one blob and
a key never changes meaning. Writes are atomic: a reader sees the whole blob or none (the
filesystem store writes a temp file and renames it into place; S3 PUTs are atomic).

    store = from_settings(dir="/var/lib/sandlot/bundles", url="")
    blob = store.put(fileobj, namespace="t1")   # -> Blob(key, sha256, size)
    with store.open(blob.key) as f: ...          # a seekable binary file
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol
from urllib.parse import parse_qs, urlsplit

from app.security.files import private_dir

CHUNK = 1024 * 1024
KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}/[0-9a-f]{64}\.zip$")
NAMESPACE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class BlobStoreError(Exception):
    """The store could not be reached or refused an operation."""


class BlobMissing(BlobStoreError):
    """No blob under that key."""


@dataclass(frozen=True)
class Blob:
    key: str
    sha256: str
    size: int


class BlobStore(Protocol):
    def put(self, source: IO[bytes], namespace: str) -> Blob: ...

    def open(self, key: str) -> contextlib.AbstractContextManager[IO[bytes]]: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...


def blob_key(namespace: str, sha256: str) -> str:
    if not NAMESPACE.match(namespace):
        raise ValueError(f"bad blob namespace {namespace!r}")
    return f"{namespace}/{sha256}.zip"


def check_key(key: str) -> str:
    """Refuse anything but our own key shape, so a key can never name a path outside the store."""
    if not KEY.match(key or ""):
        raise BlobMissing(f"not a bundle key: {key!r}")
    return key


def hash_copy(source: IO[bytes], target: IO[bytes]) -> tuple[str, int]:
    """Copy `source` to `target` in chunks; the sha256 and size of what was copied."""
    digest, size = hashlib.sha256(), 0
    while chunk := source.read(CHUNK):
        digest.update(chunk)
        target.write(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


class FileBlobStore:
    """Blobs as files under `root` (created on first write)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def put(self, source: IO[bytes], namespace: str) -> Blob:
        directory = self.root / namespace
        blob_key(namespace, "0" * 64)  # validates the namespace before touching the disk
        private_dir(self.root)
        private_dir(directory)
        fd, temp = tempfile.mkstemp(prefix=".incoming-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                sha, size = hash_copy(source, out)
                out.flush()
                os.fsync(out.fileno())
            key = blob_key(namespace, sha)
            os.replace(temp, self._path(key))  # atomic: readers see all of it or nothing
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        return Blob(key, sha, size)

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[IO[bytes]]:
        try:
            handle = open(self._path(key), "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            raise BlobMissing(f"no blob {key!r}") from None
        with handle:
            yield handle

    def exists(self, key: str) -> bool:
        try:
            return self._path(key).is_file()
        except BlobMissing:
            return False

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()


class S3BlobStore:
    """Blobs as objects in an S3-compatible bucket, under an optional prefix.

    Credentials come from boto3's usual sources (environment, config files); none are
    taken from the URL, so a store URL is never a secret.
    """

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str | None = None, client=None):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client or _s3_client(endpoint_url, region)

    def _object(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, source: IO[bytes], namespace: str) -> Blob:
        blob_key(namespace, "0" * 64)
        # The key is the content's hash, so hash first into a local spool, then upload.
        with tempfile.TemporaryFile() as spool:
            sha, size = hash_copy(source, spool)
            spool.seek(0)
            key = blob_key(namespace, sha)
            try:
                self.client.upload_fileobj(spool, self.bucket, self._object(key))
            except Exception as exc:
                raise BlobStoreError(f"could not store bundle: {type(exc).__name__}") from exc
        return Blob(key, sha, size)

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[IO[bytes]]:
        name = self._object(key)
        with tempfile.TemporaryFile() as local:
            try:
                self.client.download_fileobj(self.bucket, name, local)
            except Exception as exc:
                if _is_not_found(exc):
                    raise BlobMissing(f"no blob {key!r}") from None
                raise BlobStoreError(f"could not read bundle: {type(exc).__name__}") from exc
            local.seek(0)
            yield local

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._object(key))
        except BlobMissing:
            return False
        except Exception as exc:
            if _is_not_found(exc):
                return False
            raise BlobStoreError(f"could not reach the bundle store: {type(exc).__name__}") from exc
        return True

    def delete(self, key: str) -> None:
        name = self._object(key)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=name)
        except Exception as exc:
            if not _is_not_found(exc):
                raise BlobStoreError(f"could not delete bundle: {type(exc).__name__}") from exc


def _s3_client(endpoint_url: str | None, region: str | None):
    import boto3
    from botocore.config import Config

    # Path-style addressing: a custom endpoint (MinIO, a local test server) has no
    # per-bucket DNS names.
    config = Config(s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=60,
                    retries={"max_attempts": 3})
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region or "us-east-1",
                        config=config)


def _is_not_found(exc: Exception) -> bool:
    response = getattr(exc, "response", None) or {}
    code = str((response.get("Error") or {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


def from_settings(directory: str, url: str | None) -> BlobStore:
    """The store a deployment configured: `url` s3://bucket/prefix?endpoint=...&region=...,
    or file:///path, or empty for `directory`."""
    if not url:
        return FileBlobStore(directory)
    parts = urlsplit(url)
    if parts.scheme == "file":
        return FileBlobStore(parts.path)
    if parts.scheme != "s3" or not parts.hostname:
        raise ValueError("SKILL_BUNDLE_STORE must be s3://bucket/prefix or file:///path")
    query = parse_qs(parts.query)
    return S3BlobStore(parts.netloc, parts.path, endpoint_url=(query.get("endpoint") or [None])[0],
                       region=(query.get("region") or [None])[0])


def copy_to(store: BlobStore, key: str, target: IO[bytes]) -> None:
    """Stream a blob into `target` (used to hand a bundle on without loading it)."""
    with store.open(key) as source:
        shutil.copyfileobj(source, target, CHUNK)
