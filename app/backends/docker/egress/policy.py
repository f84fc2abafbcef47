"""A sandbox's egress policy as the host enforces it, and the record of one sandbox's
enforcement (what the state file holds). Pure: no I/O.

Order of decisions for a new outbound connection (nft.py builds exactly this), from the
one list of special-use ranges the SSRF guard uses too (app/security/special_ranges.py):

1. never: "this network" (0.0.0.0/8), link-local and metadata (169.254.0.0/16),
   multicast, reserved and broadcast (224.0.0.0/4, 240.0.0.0/4);
2. every other special-use range (private, loopback, shared 100.64/10, IETF 192.0.0/24,
   documentation, benchmarking 198.18/15, the old 6to4 relay) only where an `allow_out`
   entry lies inside it: a broad allow such as 0.0.0.0/0 does not open them, naming
   10.1.2.3, 198.18.0.0/15 or 192.0.2.0/24 does;
3. allow > deny > default: `allow_out` IPs/CIDRs and IPs learned from DNS answers for
   allowed names pass; then `deny_out` drops; then the default (deny-all or open).

The host itself is refused separately (only DNS to the resolver reaches it).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from app.backends.base import BackendError, ResolvedNetworkPolicy
from app.security import special_ranges

# The IPv4 side of the shared list (IPv6 egress is dropped whole, see nft.py).
NEVER = special_ranges.ipv4_cidrs(never=True)
PRIVATE = special_ranges.ipv4_cidrs(never=False)  # special-use ranges allow_out may open
EGRESS_ID = re.compile(r"^[0-9a-f]{10}$")
FILE_VERSION = 1


def _networks(entries: tuple[str, ...], what: str) -> list[ipaddress.IPv4Network]:
    nets = []
    for entry in entries:
        try:
            net = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise BackendError(f"{what} entry {entry!r} is not an IPv4 address or CIDR") from None
        if net.version != 4:
            raise BackendError(f"{what} entry {entry!r}: IPv6 is not supported")
        nets.append(net)
    return nets


def _collapse(nets: list[ipaddress.IPv4Network]) -> tuple[str, ...]:
    """Merged, sorted CIDRs: nft interval sets refuse overlapping elements."""
    return tuple(str(n) for n in ipaddress.collapse_addresses(nets))


def _domain(entry: str) -> str | None:
    """`example.com` / `*.example.com` (lowercase, no trailing dot), or None for an IP."""
    value = entry.strip().lower().rstrip(".")
    try:
        ipaddress.ip_network(value, strict=False)
        return None
    except ValueError:
        pass
    if "/" in value:
        return None  # a malformed CIDR: _networks reports it
    return value


def is_private(net: ipaddress.IPv4Network) -> bool:
    """Does this allow_out entry name (part of) a special-use range it may open?"""
    return special_ranges.opens_by_naming(net)


def learnable(ip: str) -> bool:
    """May an IP from a DNS answer join the learned set? Only a globally reachable IPv4
    address: an allowed name must not open the app's database (DNS rebinding) or any
    other special-use range. Those are reachable only by naming them in allow_out (then
    through that entry, whatever DNS says)."""
    try:
        address = ipaddress.IPv4Address(ip)
    except ValueError:
        return False
    return not special_ranges.is_special(address)


@dataclass(frozen=True)
class EgressPolicy:
    deny_all: bool = False
    allow: tuple[str, ...] = ()  # allow_out IPs/CIDRs, collapsed
    deny: tuple[str, ...] = ()  # deny_out IPs/CIDRs, collapsed, without /0 (that is deny_all)
    domains: tuple[str, ...] = ()  # "example.com" or "*.example.com"
    # As the config wrote them, so the gateway can name the rule that decided
    # ("allow_out[2] *.example.org"); empty in state files from before the gateway.
    allow_out: tuple[str, ...] = ()
    deny_out: tuple[str, ...] = ()
    name: str = ""  # the config's name when the sandbox was made, for denial messages

    @classmethod
    def from_resolved(cls, policy: ResolvedNetworkPolicy) -> EgressPolicy:
        domains, ips = [], []
        for entry in policy.allow_out:
            name = _domain(entry)
            if name is None:
                ips.append(entry)
            elif name not in domains:
                domains.append(name)
        allow = _networks(tuple(ips), "allow_out")
        deny = _networks(policy.deny_out, "deny_out")
        deny_all = not policy.allow_internet_access or any(n.prefixlen == 0 for n in deny)
        return cls(deny_all=deny_all, allow=_collapse(allow),
                   deny=_collapse([n for n in deny if n.prefixlen]), domains=tuple(domains),
                   allow_out=tuple(e.strip() for e in policy.allow_out),
                   deny_out=tuple(e.strip() for e in policy.deny_out), name=policy.name)

    @property
    def private_allow(self) -> tuple[str, ...]:
        """The allow_out entries that name (part of) a special-use range."""
        return tuple(n for n in self.allow if is_private(ipaddress.IPv4Network(n)))

    def allows_name(self, name: str) -> bool:
        """Exact entry, or `*.suffix` with name ending in `.suffix` (not the apex)."""
        name = name.lower().rstrip(".")
        for entry in self.domains:
            if entry == name:
                return True
            if entry.startswith("*.") and name.endswith(entry[1:]):
                return True
        return False

    def as_dict(self) -> dict[str, Any]:
        return {"deny_all": self.deny_all, "allow": list(self.allow), "deny": list(self.deny),
                "domains": list(self.domains), "allow_out": list(self.allow_out),
                "deny_out": list(self.deny_out), "name": self.name}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EgressPolicy:
        return cls(deny_all=bool(raw["deny_all"]), allow=tuple(raw["allow"]),
                   deny=tuple(raw["deny"]), domains=tuple(raw["domains"]),
                   allow_out=tuple(raw.get("allow_out") or ()),
                   deny_out=tuple(raw.get("deny_out") or ()), name=str(raw.get("name") or ""))


@dataclass(frozen=True)
class SandboxNet:
    """One sandbox's enforcement: its network, its resolver's upstream, its policy.

    Written once, at creation, as the sandbox's state file; the resolver serves from it
    and the firewall rules can be rebuilt from it (after a host reboot)."""

    id: str  # 10 hex digits: network sandlot-<id>, bridge sl-<id>, nft objects sb_<id>_*
    subnet: str
    gateway: str
    upstream: str | None  # "ip:port" the resolver forwards to; None: nothing resolves
    policy: EgressPolicy
    metadata: dict[str, str] = field(default_factory=dict)
    # The gateway's port on `gateway` that nft redirects the sandbox's TCP to; None in
    # state files from before the gateway (their TCP is decided by address in nft).
    gateway_port: int | None = None

    @property
    def network(self) -> str:
        return f"sandlot-{self.id}"

    @property
    def bridge(self) -> str:
        return f"sl-{self.id}"

    def as_dict(self) -> dict[str, Any]:
        return {"version": FILE_VERSION, "id": self.id, "network": self.network,
                "bridge": self.bridge, "subnet": self.subnet, "gateway": self.gateway,
                "upstream": self.upstream, "policy": self.policy.as_dict(),
                "metadata": dict(self.metadata), "gateway_port": self.gateway_port}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SandboxNet:
        if raw.get("version") != FILE_VERSION or not EGRESS_ID.match(str(raw.get("id"))):
            raise ValueError("not a sandlot egress state file")
        return cls(id=raw["id"], subnet=raw["subnet"], gateway=raw["gateway"],
                   upstream=raw.get("upstream"), policy=EgressPolicy.from_dict(raw["policy"]),
                   metadata=dict(raw.get("metadata") or {}),
                   gateway_port=int(raw["gateway_port"]) if raw.get("gateway_port") else None)
