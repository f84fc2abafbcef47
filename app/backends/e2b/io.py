"""Plumbing shared by the E2B and Cube backends: settings, the SDK client, error mapping.

Both providers speak the E2B API and are driven through the official `e2b` SDK with a
client bound to one config (decisions 1): nothing is read from E2B_* environment
variables, every connection setting is passed explicitly.

Endpoints: `api_url` is the control plane (default `https://api.<sandbox_domain>`).
`proxy_url`, when set, is the data-plane gateway that fronts envd: the SDK dials it
(its scheme decides http or https) and names the sandbox in the `Host` header as
`49983-<sandbox id>.<sandbox_domain>`, the way Cube's CubeProxy and self-hosted E2B
gateways route. Without it the SDK resolves `https://49983-<id>.<domain>` itself,
as on E2B's cloud.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from e2b import (
    AuthenticationException,
    FileNotFoundException,
    InvalidArgumentException,
    NotEnoughSpaceException,
    NotFoundException,
    RateLimitException,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxUnreachableException,
    ServiceBusyException,
    TimeoutException,
)

from app.backends.base import (
    BackendAuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    QuotaExceeded,
    SandboxNotFound,
    SandboxPathNotFound,
    causes,
)
from app.security import ssrf

DEFAULT_HTTP_TIMEOUT = 30
ENVD_PORT = 49983


def _seconds(raw: dict[str, Any], key: str, default: int) -> int:
    value = raw.get(key)
    if value in (None, "", 0, "0"):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BackendError(f"invalid {key}: {value!r}") from None
    if number <= 0:
        raise BackendError(f"invalid {key}: must be positive")
    return number


@dataclass(frozen=True)
class E2BSettings:
    """A config's `e2b` or `cube` block (reference 1.2) plus allow_private_endpoints."""

    provider: str
    api_key: str = field(default="", repr=False)
    template_id: str = ""
    api_url: str = ""
    sandbox_domain: str = ""
    proxy_url: str = ""
    http_timeout_sec: int = DEFAULT_HTTP_TIMEOUT
    ttl_seconds: int = 300
    dns_servers: tuple[str, ...] = ()
    allow_private_endpoints: bool = False

    @classmethod
    def from_dict(cls, provider: str, raw: dict[str, Any], ttl_key: str,
                  default_ttl: int) -> E2BSettings:
        return cls(
            provider=provider,
            api_key=str(raw.get("api_key") or ""),
            template_id=str(raw.get("template_id") or "").strip(),
            api_url=str(raw.get("api_url") or "").strip().rstrip("/"),
            sandbox_domain=str(raw.get("sandbox_domain") or "").strip(),
            proxy_url=str(raw.get("proxy_url") or "").strip().rstrip("/"),
            http_timeout_sec=_seconds(raw, "http_timeout_sec", DEFAULT_HTTP_TIMEOUT),
            ttl_seconds=_seconds(raw, ttl_key, default_ttl),
            dns_servers=tuple(str(s).strip() for s in raw.get("dns_servers") or () if s),
            allow_private_endpoints=bool(raw.get("allow_private_endpoints")),
        )

    @property
    def domain(self) -> str:
        return self.sandbox_domain or "e2b.app"

    @property
    def control_url(self) -> str:
        return self.api_url or f"https://api.{self.domain}"

    def check_endpoints(self) -> None:
        """The SSRF guard at use time: private/loopback endpoints only when allowed."""
        for name, url in (("api_url", self.control_url), ("proxy_url", self.proxy_url)):
            if not url:
                continue
            guard_url(url, f"{self.provider} {name}", self.allow_private_endpoints)

    def api_params(self, api_key: str) -> dict[str, Any]:
        """The SDK's ApiParams for this config (per client, never from the environment)."""
        params: dict[str, Any] = {
            "api_key": api_key,
            "api_url": self.control_url,
            "domain": self.domain,
            "debug": False,
            "request_timeout": float(self.http_timeout_sec),
        }
        if self.proxy_url:
            params["sandbox_url"] = self.proxy_url
        return params


def guard_url(url: str, label: str, allow_private: bool) -> None:
    """The SSRF guard: a host that does not resolve is unavailable, a private one refused."""
    try:
        ssrf.check_url(url, allow_private=allow_private)
    except ssrf.UnsafeURL as exc:
        if isinstance(exc.__cause__, OSError | UnicodeError):
            raise BackendUnavailable(f"{label} {where(url)}: {exc}") from None
        raise BackendError(f"{label} {where(url)}: unsafe outbound URL: {exc}") from None


def where(url: str) -> str:
    """scheme://host[:port] of a URL: never its path, query or credentials."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(invalid URL)"
    return f"{parts.scheme}://{host}{port}"


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """Mask secret values a provider message might echo back."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def _message(exc: BaseException, secrets: tuple[str, ...], limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = scrub(text, secrets)
    return text if len(text) <= limit else text[:limit] + "..."


def translate(exc: BaseException, settings: E2BSettings, what: str,
              secrets: tuple[str, ...]) -> BackendError:
    """Map an SDK / transport failure to the protocol's typed errors (no secret in text)."""
    name, place = settings.provider.capitalize(), where(settings.control_url)
    for cause in causes(exc):
        if isinstance(cause, BackendError):
            return cause
        if isinstance(cause, AuthenticationException):
            return BackendAuthError(f"{name} rejected the API key ({what})")
        if isinstance(cause, SandboxNotRunningException | SandboxNotFoundException):
            return SandboxNotFound(f"{what}: no such sandbox")
        if isinstance(cause, FileNotFoundException):
            return SandboxPathNotFound(f"{what}: {_message(cause, secrets)}")
        if isinstance(cause, NotFoundException):
            return SandboxNotFound(f"{what}: {_message(cause, secrets)}")
        if isinstance(cause, RateLimitException):
            return QuotaExceeded(f"{name} rate limit or quota reached ({what})")
        if isinstance(cause, NotEnoughSpaceException):
            return QuotaExceeded(f"{what}: the sandbox is out of disk space")
        if isinstance(cause, ServiceBusyException):
            return BackendUnavailable(f"{name} has no capacity right now ({what}); retry")
        if isinstance(cause, SandboxUnreachableException):
            return BackendUnavailable(f"{what}: the sandbox could not be reached")
        if isinstance(cause, TimeoutException | httpx.TimeoutException | TimeoutError):
            if isinstance(cause, httpx.ConnectTimeout):
                return BackendUnavailable(f"{name} not reachable at {place}")
            return BackendTimeout(f"{name} did not answer {what} within "
                                  f"{settings.http_timeout_sec} s")
        if isinstance(cause, InvalidArgumentException):
            return BackendError(f"{what} failed: {_message(cause, secrets)}")
        if isinstance(cause, httpx.TransportError | ConnectionError):
            return BackendUnavailable(f"{name} not reachable at {place} ({what})")
        if isinstance(cause, SandboxException):
            return _from_status(cause, name, what, secrets)
    return BackendError(f"{what} failed: {_message(exc, secrets)}")


# How the SDK spells a refused envd request: "403: ..." from the HTTP API, the Connect
# code from RPCs (envd and gateways answer 403 without an SDK exception class of its own).
_REFUSED = ("403:", "Code.PERMISSION_DENIED", "Code.UNAUTHENTICATED")


def _from_status(exc: SandboxException, name: str, what: str,
                 secrets: tuple[str, ...]) -> BackendError:
    status = getattr(exc, "status_code", None)
    if str(exc).startswith(_REFUSED):
        return BackendAuthError(f"{name} refused {what}: permission denied "
                                "(missing or wrong access token)")
    if status == 404:
        return SandboxNotFound(f"{what}: no such sandbox")
    if status in (401, 403):
        return BackendAuthError(f"{name} refused {what} ({status})")
    if status in (502, 503, 504):
        return BackendUnavailable(f"{name} is unavailable ({what}: {status})")
    return BackendError(f"{what} failed: {_message(exc, secrets)}")


@contextmanager
def errors(settings: E2BSettings, what: str, secrets: tuple[str, ...] = ()) -> Iterator[None]:
    """Every SDK failure inside becomes a typed BackendError without the original chain:
    SDK exceptions carry request URLs and response bodies that may echo secrets."""
    try:
        yield
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - every provider failure becomes a typed one
        raise translate(exc, settings, what, (settings.api_key, *secrets)) from None


class Capped:
    """One output stream kept up to `limit` bytes; the rest is counted and dropped."""

    def __init__(self, limit: int):
        self.data = bytearray()
        self.limit = max(0, limit)
        self.truncated = False

    def add(self, chunk: str) -> None:
        raw = chunk.encode("utf-8", "surrogateescape")
        room = self.limit - len(self.data)
        if len(raw) > room:
            self.truncated = True
        if room > 0:
            self.data += raw[:room]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
