"""Special-use (non-global) address ranges: the one list behind every outbound guard.

The SSRF guard (app/security/ssrf.py, safe_http.py) and the sandbox egress rules
(app/backends/egress: nftables built-in denies and the DNS answers the resolver learns)
both decide from this list, so what one refuses the other refuses too.

Sources: IANA's IPv4 and IPv6 Special-Purpose Address Registries, every entry that is not
globally reachable (RFC 6890), plus multicast, the deprecated IPv6 site-local range and
the IPv6 space outside global unicast (2000::/3). Two kinds:

- `never`: link-local (where cloud metadata services live), metadata, "this network" /
  unspecified, multicast and reserved. Nothing opens them: not the operator's
  private-endpoint flag, not a policy's `allow_out`.
- the others (private, loopback, shared, documentation, benchmarking, protocol
  assignments...): refused by default; the guard opens them only when private endpoints
  are allowed, the egress rules only where `allow_out` names (part of) the range.

Registry entries inside these ranges that IANA marks globally reachable (192.0.0.9,
192.0.0.10, a few 2001::/23 blocks) stay refused: nothing here needs them, and a shorter
list of whole blocks is easier to check. IPv6 forms that embed an IPv4 address (mapped,
6to4, NAT64) are judged by that address: see `embedded_ipv4`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class SpecialRange:
    network: Network
    name: str
    never: bool  # True: no flag or allow_out entry ever opens it


def _range(cidr: str, name: str, *, never: bool = False) -> SpecialRange:
    return SpecialRange(ipaddress.ip_network(cidr), name, never)


SPECIAL_RANGES: tuple[SpecialRange, ...] = (
    # IPv4 (RFC 6890 and later)
    _range("0.0.0.0/8", "this network", never=True),
    _range("10.0.0.0/8", "private-use"),
    _range("100.64.0.0/10", "shared address space"),
    _range("127.0.0.0/8", "loopback"),
    _range("169.254.0.0/16", "link-local (cloud metadata)", never=True),
    _range("172.16.0.0/12", "private-use"),
    _range("192.0.0.0/24", "IETF protocol assignments"),
    _range("192.0.2.0/24", "documentation (TEST-NET-1)"),
    _range("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    _range("192.168.0.0/16", "private-use"),
    _range("198.18.0.0/15", "benchmarking"),
    _range("198.51.100.0/24", "documentation (TEST-NET-2)"),
    _range("203.0.113.0/24", "documentation (TEST-NET-3)"),
    _range("224.0.0.0/4", "multicast", never=True),
    _range("240.0.0.0/4", "reserved", never=True),
    _range("255.255.255.255/32", "limited broadcast", never=True),
    # IPv6
    _range("::/128", "unspecified", never=True),
    _range("::1/128", "loopback"),
    _range("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    _range("100::/64", "discard-only"),
    _range("100:0:0:1::/64", "dummy prefix"),
    _range("2001::/23", "IETF protocol assignments"),
    _range("2001:db8::/32", "documentation"),
    _range("3fff::/20", "documentation"),
    _range("5f00::/16", "segment routing (SRv6) SIDs"),
    _range("fc00::/7", "unique-local"),
    _range("fd00:ec2::254/128", "cloud metadata (AWS)", never=True),
    _range("fe80::/10", "link-local", never=True),
    _range("fec0::/10", "deprecated site-local"),
    _range("ff00::/8", "multicast", never=True),
)

# Prefixes whose addresses carry an IPv4 address in their last 32 bits, and reach it:
# IPv4-mapped (::ffff:0:0/96) and the NAT64 well-known prefix (64:ff9b::/96). 6to4
# (2002::/16) carries it in bits 16-48.
_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# IPv6 outside global unicast (2000::/3) and outside every range above is unallocated or
# reserved by the IETF (IPv4-compatible ::a.b.c.d, 4000::/3...): never a real target.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_OUTSIDE_GLOBAL_UNICAST = SpecialRange(ipaddress.IPv6Network("::/0"),
                                       "reserved IPv6 (outside 2000::/3)", never=True)


def parse(address: str | Address) -> Address:
    """An IP address, without an IPv6 zone (`fe80::1%eth0`)."""
    if isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return address
    return ipaddress.ip_address(address.split("%", 1)[0])


def embedded_ipv4(address: str | Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, NAT64, 6to4), else None."""
    ip = parse(address)
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip in _MAPPED or ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def special_range(address: str | Address) -> SpecialRange | None:
    """The range `address` (or the IPv4 address it embeds) falls in; a `never` range
    wins over any other that also holds it. None for a globally reachable address."""
    ip = parse(address)
    embedded = embedded_ipv4(ip)
    candidates = [ip] if embedded is None else [ip, embedded]
    found = [r for r in SPECIAL_RANGES for c in candidates
             if c.version == r.network.version and c in r.network]
    if not found:
        if embedded is None and ip.version == 6 and ip not in _GLOBAL_UNICAST:
            return _OUTSIDE_GLOBAL_UNICAST
        return None
    return next((r for r in found if r.never), found[0])


def is_special(address: str | Address) -> bool:
    """True for any non-global address (see the module docstring)."""
    return special_range(address) is not None


def is_never(address: str | Address) -> bool:
    """True for addresses nothing ever opens: link-local, metadata, unspecified,
    multicast, reserved (and IPv6 forms that embed one)."""
    found = special_range(address)
    return found is not None and found.never


def ipv4_cidrs(*, never: bool) -> tuple[str, ...]:
    """The IPv4 ranges of one kind, sorted, without those inside another (nftables
    interval sets refuse overlaps); adjacent ranges stay apart, as the registry names them."""
    nets = sorted(r.network for r in SPECIAL_RANGES if r.never is never and r.network.version == 4)
    return tuple(str(n) for n in nets
                 if not any(o != n and n.subnet_of(o) for o in nets))


def opens_by_naming(network: Network) -> bool:
    """Does an allow_out entry naming `network` open (part of) a special range? Only an
    entry inside one openable range: a broad allow such as 0.0.0.0/0 opens nothing."""
    return any(network.version == r.network.version and network.subnet_of(r.network)
               for r in SPECIAL_RANGES if not r.never)
