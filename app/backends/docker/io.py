"""Low-level pieces of the Docker backend: settings, error translation, exec streams, tar.

Kept apart from `docker.py` so the backend reads as the protocol it implements.
"""

from __future__ import annotations

import io
import os
import ssl
import struct
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker
import requests
import urllib3

from app.backends.base import (
    BackendAuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    SandboxNotFound,
    causes,
)

DEFAULT_HOST = "unix:///var/run/docker.sock"
DEFAULT_HTTP_TIMEOUT = 30


def _positive(value: Any, kind: type) -> Any:
    """Config numbers: 0, "" and None mean "not set"."""
    if value in (None, "", 0, "0"):
        return None
    number = kind(value)
    if number <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return number


@dataclass(frozen=True)
class DockerSettings:
    """The config's `docker` block (reference 1.2); unknown keys are ignored."""

    image: str = ""
    host: str = DEFAULT_HOST
    tls_cert_path: str = ""
    cpu_limit: float | None = None
    memory_limit_mb: int | None = None
    pids_limit: int | None = None
    disk_limit_mb: int | None = None
    network_mode: str = "bridge"
    runtime: str = ""
    idle_ttl_seconds: int | None = None
    http_timeout_sec: int = DEFAULT_HTTP_TIMEOUT

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DockerSettings:
        network_mode = str(raw.get("network_mode") or "bridge")
        if network_mode not in ("bridge", "none"):
            raise BackendError("docker network_mode must be bridge or none")
        try:
            return cls(
                image=str(raw.get("image") or ""),
                host=str(raw.get("host") or DEFAULT_HOST),
                tls_cert_path=str(raw.get("tls_cert_path") or ""),
                cpu_limit=_positive(raw.get("cpu_limit"), float),
                memory_limit_mb=_positive(raw.get("memory_limit_mb"), int),
                pids_limit=_positive(raw.get("pids_limit"), int),
                disk_limit_mb=_positive(raw.get("disk_limit_mb"), int),
                network_mode=network_mode,
                runtime=str(raw.get("runtime") or ""),
                idle_ttl_seconds=_positive(raw.get("idle_ttl_seconds"), int),
                http_timeout_sec=_positive(raw.get("http_timeout_sec"), int)
                or DEFAULT_HTTP_TIMEOUT,
            )
        except (TypeError, ValueError) as exc:
            raise BackendError(f"invalid docker settings: {exc}") from None


def make_client(settings: DockerSettings) -> docker.APIClient:
    """A low-level client; asks the engine its API version (so it fails when unreachable)."""
    tls: docker.tls.TLSConfig | bool = False
    if settings.tls_cert_path:
        paths = {name: os.path.join(settings.tls_cert_path, f"{name}.pem")
                 for name in ("ca", "cert", "key")}
        missing = [f"{name}.pem" for name, path in paths.items() if not os.path.isfile(path)]
        if missing:
            raise BackendAuthError(f"TLS files missing in {settings.tls_cert_path}: "
                                   f"{', '.join(missing)}")
        tls = docker.tls.TLSConfig(client_cert=(paths["cert"], paths["key"]),
                                   ca_cert=paths["ca"], verify=True)
    # The version is asked only once the client ignores the environment: requests would
    # let REQUESTS_CA_BUNDLE (or CURL_CA_BUNDLE) replace the engine's own CA on every
    # request, and would look up proxies and .netrc (a file read, ~1 ms) on each call.
    client = docker.APIClient(base_url=settings.host, tls=tls, timeout=settings.http_timeout_sec,
                              version=docker.constants.MINIMUM_DOCKER_API_VERSION)
    client.trust_env = False
    client._version = client._retrieve_server_version()  # what version="auto" would do
    return client


_clients: dict[tuple[str, str, int], docker.APIClient] = {}
_clients_lock = threading.Lock()


def shared_client(settings: DockerSettings) -> docker.APIClient:
    """One client per engine (host, TLS files, timeout) per process, made on first use.

    A client asks the engine its API version when made (a round trip per request when
    each request made its own); requests' session is safe to share between threads,
    and its pool keeps connections to the engine open.
    """
    key = (settings.host, settings.tls_cert_path, settings.http_timeout_sec)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = make_client(settings)
        return client


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """Mask secret values (env values) that an engine message might echo back."""
    for secret in secrets:
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def translate(exc: BaseException, host: str, timeout: int, what: str,
              secrets: tuple[str, ...] = ()) -> BackendError:
    """Map a docker-py / requests / socket failure to the protocol's typed errors."""
    for cause in causes(exc):
        if isinstance(cause, BackendError):
            return cause
        if isinstance(cause, docker.errors.TLSParameterError | requests.exceptions.SSLError
                      | ssl.SSLError):
            return BackendAuthError(f"TLS handshake with the Docker engine at {host} failed; "
                                    "check tls_cert_path")
        if isinstance(cause, requests.exceptions.ConnectTimeout):
            return BackendUnavailable(f"Docker engine not reachable at {host}")
        if isinstance(cause, requests.exceptions.ReadTimeout | urllib3.exceptions.ReadTimeoutError
                      | TimeoutError):
            return BackendTimeout(f"Docker engine at {host} did not answer {what} "
                                  f"within {timeout} s")
        if isinstance(cause, docker.errors.ImageNotFound):
            return BackendError(f"{what} failed: image not found on {host}")
        if isinstance(cause, docker.errors.NotFound):
            return SandboxNotFound(f"{what}: no such sandbox")
        if isinstance(cause, docker.errors.APIError):
            detail = scrub(str(cause.explanation or cause), secrets)
            return BackendError(f"{what} failed: {detail}")
        if isinstance(cause, requests.exceptions.ConnectionError | urllib3.exceptions.HTTPError
                      | ConnectionError | FileNotFoundError):
            return BackendUnavailable(f"Docker engine not reachable at {host}")
    return BackendError(f"{what} failed: {scrub(str(exc), secrets)}")


# -- exec streams ------------------------------------------------------------------------

HEADER = struct.Struct(">BxxxL")


@dataclass
class RawRun:
    stdout: bytes
    stderr: bytes
    exit_code: int | None
    elapsed: float
    truncated: bool
    deadline_hit: bool
    exec_id: str = ""
    new_files: int | None = None
    lost: bool = False  # the exec agent went away mid-run (its exit code unknown)


OnOutput = Callable[[int, bytes], None]


class _Capped:
    """One output stream kept up to `limit` bytes; the rest is drained and dropped."""

    def __init__(self, limit: int):
        self.data = bytearray()
        self.limit = limit
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        if room > 0:
            self.data += chunk[:room]


class HoldBack:
    """Passes output on live, except the exit line the exec's wrapper prints on stderr
    after the command (behind `marker`): stderr that could be the start of it waits for
    the next chunk, and from the marker on nothing is passed."""

    def __init__(self, sink: OnOutput, marker: str):
        self.sink, self.marker, self.held, self.ended = sink, marker.encode(), b"", False

    def __call__(self, stream: int, chunk: bytes) -> None:
        if stream != 2 or not self.marker:
            self.sink(stream, chunk)
            return
        if self.ended:
            return
        self.held += chunk
        at = self.held.find(self.marker)
        if at >= 0:
            self.ended = True
            if at:
                self.sink(2, self.held[:at])
            return
        keep = next((k for k in range(min(len(self.marker) - 1, len(self.held)), 0, -1)
                     if self.held.endswith(self.marker[:k])), 0)
        if len(self.held) > keep:
            self.sink(2, self.held[:len(self.held) - keep])
            self.held = self.held[len(self.held) - keep:]


def start_exec(api: docker.APIClient, exec_id: str) -> Any:
    """POST /exec/{id}/start hijacked, returning the raw response.

    docker-py's own stream readers block without a deadline (or with the short HTTP
    timeout), so we read the multiplexed stream ourselves; see `read_exec`.
    """
    response = api._post_json(api._url("/exec/{0}/start", exec_id),
                              headers={"Connection": "Upgrade", "Upgrade": "tcp"},
                              data={"Tty": False, "Detach": False}, stream=True)
    api._raise_for_status(response)
    return response


def read_exec(response: Any, deadline: float, limit: int, err_extra: int = 0,
              on_output: OnOutput | None = None) -> tuple[bytes, bytes, bool, bool]:
    """Demultiplex stdout/stderr until EOF or the monotonic `deadline`.

    Reads through the HTTP response's buffered reader (bytes that arrived with the
    headers are already in its buffer) with the socket timeout set to the time left.
    Returns (stdout, stderr, truncated, deadline_hit). `on_output(stream, chunk)` sees
    every frame as it arrives (stream 1 stdout, 2 stderr), for a live view of a run.
    """
    reader = response.raw._fp.fp
    try:
        return read_frames(reader, reader.raw._sock, deadline, limit, err_extra, on_output)
    finally:
        response.close()


class FrameTooLarge(Exception):
    """A frame longer than the reader allows (an exec agent misbehaving)."""


def read_frames(reader: Any, sock: Any, deadline: float, limit: int, err_extra: int = 0,
                on_output: OnOutput | None = None,
                other: Callable[[int, bytes], bool] | None = None,
                max_frame: int | None = None) -> tuple[bytes, bytes, bool, bool]:
    """`read_exec` on any buffered reader over `sock`. `other(kind, payload)` sees the
    frames of streams other than 1 and 2, and ends the read by answering True; with
    `max_frame`, a longer frame raises FrameTooLarge (what was read so far is lost)."""
    streams = {1: _Capped(limit), 2: _Capped(limit + err_extra)}
    pending = bytearray()
    deadline_hit = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                deadline_hit = True
                break
            sock.settimeout(left)
            chunk = reader.read1(65536)
            if not chunk:
                break
            pending += chunk
            pending, done = _take_frames(pending, streams, on_output, other, max_frame)
            if done:
                break
    except TimeoutError:
        deadline_hit = True
    out, err = streams[1], streams[2]
    return bytes(out.data), bytes(err.data), out.truncated or err.truncated, deadline_hit


def _take_frames(pending: bytearray, streams: dict[int, _Capped],
                 on_output: OnOutput | None = None,
                 other: Callable[[int, bytes], bool] | None = None,
                 max_frame: int | None = None) -> tuple[bytearray, bool]:
    while len(pending) >= HEADER.size:
        kind, size = HEADER.unpack_from(pending)
        if max_frame is not None and size > max_frame:
            raise FrameTooLarge(f"a frame of {size} bytes")
        if len(pending) < HEADER.size + size:
            break
        payload = bytes(pending[HEADER.size:HEADER.size + size])
        del pending[:HEADER.size + size]
        if kind in streams:
            streams[kind].add(payload)
            if on_output is not None:
                on_output(kind, payload)
        elif other is not None and other(kind, payload):
            return pending, True
    return pending, False


def take_exit_marker(err: bytes, marker: str, limit: int) -> tuple[bytes, int | None, bool]:
    """Split the exit code the exec's wrapper printed after `marker` off the end of
    stderr: (stderr as the command wrote it, capped at `limit`; the code or None; whether
    the command's own stderr went past `limit`)."""
    if not marker:
        return err, None, False
    head, found, code = err.rpartition(marker.encode())
    if not found or not code.isdigit():
        return err[:limit], None, len(err) > limit
    return head[:limit], int(code), len(head) > limit


def take_new_files(err: bytes, marker: str) -> tuple[bytes, int | None]:
    """Split the count of new files the wrapper may append to its exit line
    (`<marker><code>:<count>`) off stderr: (stderr with the plain exit line, the count)."""
    head, found, tail = err.rpartition(marker.encode()) if marker else (b"", b"", b"")
    code, colon, count = tail.partition(b":")
    if not found or not colon or not code.isdigit() or not count.isdigit():
        return err, None
    return head + found + code, int(count)


def wait_exit_code(api: docker.APIClient, exec_id: str, wait: float = 2.0) -> int | None:
    """The exec's exit code; the engine may record it a moment after the stream ends."""
    end = time.monotonic() + wait
    while True:
        info = api.exec_inspect(exec_id)
        if not info.get("Running"):
            return info.get("ExitCode")
        if time.monotonic() >= end:
            return None
        time.sleep(0.02)


# -- tar ---------------------------------------------------------------------------------

def tar_one_file(name: str, data: bytes, uid: int, mode: int = 0o644) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        info.uid = info.gid = uid
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar_one(archive: bytes) -> tuple[tarfile.TarInfo, bytes | None]:
    """The first member of a `get_archive` tarball and, for a regular file, its bytes."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
        member = tar.next()
        if member is None:
            raise BackendError("the engine returned an empty archive")
        handle = tar.extractfile(member) if member.isfile() else None
        return member, handle.read() if handle else None
