"""Outbound URL safety: refuse private, loopback, link-local and other special-use
destinations (app/security/special_ranges.py, the list the sandbox egress rules use too).

Used for provider endpoints (api_url, proxy_url) and, later, skill sources. A target
is judged by every address its host resolves to, so a public name that points at a
private address is refused too.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from app.security import special_ranges


class UnsafeURL(ValueError):
    """The URL is malformed or reaches an address we refuse.

    `private` is True when the only fault is a private, loopback or other special-use
    address, which an operator may allow; everything else (malformed, metadata,
    link-local...) is not."""

    def __init__(self, message: str, *, private: bool = False):
        super().__init__(message)
        self.private = private


def is_never_allowed(address: str) -> bool:
    """Addresses no flag ever opens: link-local (169.254.0.0/16, where metadata services
    live, and fe80::/10), metadata, "this network" and unspecified (0.0.0.0/8, ::),
    multicast and reserved (240.0.0.0/4). IPv6 forms that embed an IPv4 address are judged
    by that address. The list is app/security/special_ranges.py, shared with the sandbox
    egress rules."""
    return special_ranges.is_never(address)


def is_public_address(address: str) -> bool:
    """True only for globally reachable unicast addresses: outside every special-use
    range (private, loopback, shared 100.64.0.0/10 where some clouds keep their metadata
    service, documentation, benchmarking...), judging IPv6 forms that embed an IPv4
    address (mapped, 6to4, NAT64) by that address too."""
    return not special_ranges.is_special(address)


def resolve(host: str, port: int, timeout: float = 3.0) -> list[str]:
    """Every address `host` resolves to (IP literals resolve to themselves)."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise UnsafeURL(f"cannot resolve host {host!r}") from exc
    finally:
        socket.setdefaulttimeout(previous)
    return sorted({info[4][0] for info in infos})


def check_url(url: str, *, allow_private: bool, schemes: tuple[str, ...] = ("http", "https")):
    """Raise UnsafeURL unless `url` is well formed and (unless allowed) public."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL("is not a valid URL") from exc
    if parts.scheme not in schemes or not parts.hostname:
        raise UnsafeURL(f"must be an {' or '.join(schemes)} URL with a host")
    if parts.username or parts.password:
        raise UnsafeURL("must not carry credentials")
    port = port or (443 if parts.scheme == "https" else 80)
    for address in resolve(parts.hostname, port):
        # The address itself stays out of the message: a name that resolves inside the
        # operator's network must not map it for the tenant who typed it.
        if is_never_allowed(address):
            raise UnsafeURL("resolves to a link-local, metadata, unspecified, multicast or "
                            "reserved address, which is never reachable")
        if not allow_private and not is_public_address(address):
            raise UnsafeURL("resolves to a private, loopback or other special-use address; "
                            "allowed only when the operator allows private endpoints and "
                            "the config's allow_private_endpoints is on", private=True)
