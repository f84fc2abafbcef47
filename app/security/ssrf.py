"""Outbound URL safety: refuse private, loopback and link-local destinations.

Used for provider endpoints (api_url, proxy_url) and, later, skill sources. A target
is judged by every address its host resolves to, so a public name that points at a
private address is refused too.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


class UnsafeURL(ValueError):
    """The URL is malformed or reaches an address we refuse."""


def is_public_address(address: str) -> bool:
    """True only for globally routable unicast addresses.

    `is_global` also refuses shared address space (100.64.0.0/10, where some clouds
    keep their metadata service) and documentation ranges; IPv6 forms that embed an
    IPv4 address (mapped, 6to4) are judged by that address too.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        elif ip.sixtofour and not is_public_address(str(ip.sixtofour)):
            return False
        elif ip.is_site_local:
            return False
    return ip.is_global and not (ip.is_private or ip.is_loopback or ip.is_link_local
                                 or ip.is_multicast or ip.is_reserved or ip.is_unspecified)


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
    if allow_private:
        return
    port = port or (443 if parts.scheme == "https" else 80)
    for address in resolve(parts.hostname, port):
        if not is_public_address(address):
            raise UnsafeURL(f"resolves to a private or loopback address ({address}); "
                            "turn on allow_private_endpoints to permit it")
