"""An HTTP GET client that cannot be steered at private addresses (skill sources, decisions 8).

Every hop (the first URL and each redirect) is judged before any connection: the host is
resolved once, every address it resolves to must be public, and the connection goes to the
vetted address itself, never to a name resolved again (no DNS rebinding between check and
connect). TLS still verifies the certificate against the host name. Bodies stream into a
spooled temp file under a byte limit, and the whole fetch runs under one deadline.

`allow_private=True` lifts the address rule (tests only). `resolver` and `connector` are
injectable so tests can play DNS and the network without either.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO
from urllib.parse import urljoin, urlsplit

from app.security.ssrf import UnsafeURL, is_never_allowed, is_public_address, resolve

CHUNK = 64 * 1024
REDIRECTS = {301, 302, 303, 307, 308}
Resolver = Callable[[str, int], list[str]]
Connector = Callable[[str, int, float], socket.socket]


class FetchError(Exception):
    """The fetch failed; the message is safe to show (no credentials, bounded length)."""


class BlockedAddress(FetchError, UnsafeURL):
    """A hop would reach a special-use address (app/security/special_ranges.py)."""


class TooLarge(FetchError):
    def __init__(self, limit: int):
        super().__init__(f"the download is larger than {limit} bytes")
        self.limit = limit


class HTTPStatus(FetchError):
    def __init__(self, url: str, status: int, detail: str):
        suffix = f": {detail}" if detail else ""
        super().__init__(f"{_display(url)} answered HTTP {status}{suffix}")
        self.status = status


@dataclass
class Response:
    url: str
    status: int
    content_type: str
    size: int
    body: IO[bytes] = field(repr=False)

    def close(self) -> None:
        self.body.close()


def offline_resolver(host: str, port: int) -> list[str]:
    """IP literals and localhost only; any other name is unknown (tests: no DNS query leaves)."""
    if host.lower().rstrip(".") == "localhost":
        return ["127.0.0.1"]
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        raise UnsafeURL(f"cannot resolve host {host!r} (name resolution is off)") from None


def default_connector(address: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((address, port), timeout=timeout)


class SafeHTTPClient:
    def __init__(self, *, allow_private: bool = False, resolver: Resolver | None = None,
                 connector: Connector | None = None, user_agent: str = "Sandlot",
                 total_timeout: float = 300.0, connect_timeout: float = 10.0,
                 max_redirects: int = 5, offline: bool = False,
                 ssl_context: ssl.SSLContext | None = None):
        self.allow_private = allow_private
        self.resolver = resolver or (offline_resolver if offline else resolve)
        self.connector = connector or default_connector
        self.user_agent = user_agent
        self.total_timeout = total_timeout
        self.connect_timeout = connect_timeout
        self.max_redirects = max_redirects
        self.ssl_context = ssl_context or ssl.create_default_context()

    def get(self, url: str, *, max_bytes: int, accept: str = "*/*") -> Response:
        """GET `url` following redirects; the body spooled to a temp file of at most `max_bytes`."""
        deadline = time.monotonic() + self.total_timeout
        for _ in range(self.max_redirects + 1):
            connection, response = self._request(url, accept, deadline)
            try:
                if response.status in REDIRECTS and response.getheader("Location"):
                    url = urljoin(url, response.getheader("Location", ""))
                    continue
                if not 200 <= response.status < 300:
                    raise HTTPStatus(url, response.status, _preview(response))
                return self._body(url, connection, response, max_bytes, deadline)
            finally:
                connection.close()
        raise FetchError(f"more than {self.max_redirects} redirects")

    # -- one hop

    def _vet(self, url: str) -> tuple[str, str, int, list[str]]:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise FetchError("is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(f"{_display(url)} is not an http(s) URL with a host")
        if parts.username or parts.password:
            raise FetchError("source URLs must not carry credentials")
        port = port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = self.resolver(parts.hostname, port)
        except UnsafeURL as exc:
            raise FetchError(str(exc)) from None
        if not addresses:
            raise FetchError(f"cannot resolve host {parts.hostname!r}")
        for address in addresses:
            if is_never_allowed(address):
                raise BlockedAddress(f"{parts.hostname} resolves to a link-local, metadata, "
                                     "unspecified, multicast or reserved address, which is "
                                     "never reachable")
            if not self.allow_private and not is_public_address(address):
                # The address is not named: it would tell a tenant about the
                # deployment's internal DNS.
                raise BlockedAddress(
                    f"{parts.hostname} resolves to a private, loopback or other "
                    "special-use address; skill sources must be public")
        return parts.scheme, parts.hostname, port, addresses

    def _request(self, url: str, accept: str, deadline: float):
        scheme, host, port, addresses = self._vet(url)
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection = self._connect(scheme, host, port, addresses, deadline)
        try:
            connection.request("GET", target, headers={
                "User-Agent": self.user_agent, "Accept": accept, "Accept-Encoding": "identity",
                "Connection": "close"})
            return connection, connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise FetchError(f"could not download from {host}: {_reason(exc)}") from None

    def _connect(self, scheme: str, host: str, port: int, addresses: list[str],
                 deadline: float) -> http.client.HTTPConnection:
        last: Exception | None = None
        for address in addresses:
            timeout = min(self.connect_timeout, _remaining(deadline))
            try:
                sock = self.connector(address, port, timeout)
            except OSError as exc:
                last = exc
                continue
            try:
                return _Connection(host, port, sock,
                                   self.ssl_context if scheme == "https" else None)
            except OSError as exc:  # ssl.SSLError included: the handshake runs here
                sock.close()
                raise FetchError(f"could not open a secure connection to {host}: "
                                 f"{_reason(exc)}") from None
        raise FetchError(f"could not reach {host}:{port}: {_reason(last)}")

    def _body(self, url: str, connection, response, max_bytes: int, deadline: float) -> Response:
        declared = response.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise TooLarge(max_bytes)
        spool = tempfile.SpooledTemporaryFile(max_size=CHUNK * 16)  # noqa: SIM115 (returned)
        size = 0
        try:
            while not response.isclosed():  # it closes itself once the body is whole
                connection.socket.settimeout(_remaining(deadline))
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(max_bytes)
                spool.write(chunk)
        except (OSError, http.client.HTTPException) as exc:
            spool.close()
            raise FetchError(f"the download from {urlsplit(url).hostname} broke off: "
                             f"{_reason(exc)}") from None
        except BaseException:
            spool.close()
            raise
        spool.seek(0)
        return Response(url, response.status, response.getheader("Content-Type", "") or "",
                        size, spool)


class _Connection(http.client.HTTPConnection):
    """An HTTP(S) connection over a socket we opened to a vetted address."""

    def __init__(self, host: str, port: int, sock: socket.socket,
                 context: ssl.SSLContext | None):
        super().__init__(host, port, timeout=sock.gettimeout())
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname=host)
        # Our own reference: http.client drops `self.sock` as soon as an answer says it will
        # close (HTTP/1.0, `Connection: close`), while the body is still being read from it.
        self.sock = self.socket = sock

    def connect(self) -> None:  # the socket is already open; never resolve the name again
        if self.sock is None:
            raise OSError("connection closed")


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError("the download took longer than the time allowed")
    return left


def _preview(response) -> str:
    try:
        text = response.read(512).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return ""
    return " ".join(text.split())[:200]


def _reason(exc: Exception | None) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLError):
        return "TLS failed"
    return type(exc).__name__ if exc is not None else "no address answered"


def _display(url: str) -> str:
    """A URL for messages: no query string (it may carry tokens), at most 200 characters."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"[:200]
