"""What the egress gateway decides for one connection, and the rule that decided it.

Pure (no I/O): the gateway (gateway.py) asks it about the name a connection presents
(TLS SNI, HTTP Host) and about addresses, in the order the nftables rules and the
resolver have always applied (policy.py):

- a name: allowed when an `allow_out` entry names it (exact, or `*.suffix` for its
  subdomains, not the apex); under deny-by-default any other name is denied; with egress
  open by default, its address decides;
- an address: the built-in special-use ranges first (some never open, the others only
  where an `allow_out` entry lies inside them), then `allow_out` CIDRs, the addresses
  learned from DNS answers for allowed names, `deny_out`, and the default.

Rules are named as the config wrote them, with their position: `allow_out[2]
*.example.org`, `deny_out[0] 203.0.113.0/24`, `default deny`, `built-in: loopback`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from app.backends.docker.egress.policy import EgressPolicy, _domain
from app.security import special_ranges


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str
    reason: str  # one sentence, for the 403 body and the log


def _position(entries: tuple[str, ...], wanted: str) -> str:
    """`allow_out[2] *.example.org`, or the bare entry when the raw list is unknown."""
    for index, raw in enumerate(entries):
        if raw.strip().lower().rstrip(".") == wanted:
            return f"[{index}] {raw.strip()}"
    return f" {wanted}"


def _network_rule(entries: tuple[str, ...], ip: ipaddress.IPv4Address,
                  fallback: tuple[str, ...]) -> str | None:
    """The first entry (an IP or CIDR) holding `ip`, with its position."""
    for index, raw in enumerate(entries):
        if _domain(raw) is not None:
            continue
        try:
            network = ipaddress.IPv4Network(raw.strip(), strict=False)
        except ValueError:
            continue
        if ip in network and network.prefixlen:
            return f"[{index}] {raw.strip()}"
    for cidr in fallback:  # state files from before the raw lists were kept
        if ip in ipaddress.IPv4Network(cidr):
            return f" {cidr}"
    return None


def default(policy: EgressPolicy, subject: str) -> Decision:
    if policy.deny_all:
        return Decision(False, "default deny", f"{subject} is not in allow_out, and egress "
                        "is denied by default")
    return Decision(True, "default allow", f"egress is open by default and no rule denies "
                    f"{subject}")


def by_name(policy: EgressPolicy, name: str) -> Decision | None:
    """The decision the name alone makes, or None when its address decides."""
    name = name.lower().rstrip(".")
    for entry in policy.domains:
        if entry == name or (entry.startswith("*.") and name.endswith(entry[1:])):
            return Decision(True, f"allow_out{_position(policy.allow_out, entry)}",
                            f"{name} matches an allow_out entry")
    if policy.deny_all:
        return default(policy, name)
    return None


def by_address(policy: EgressPolicy, address: str, learned: bool = False) -> Decision:
    """The decision for one IPv4 address; `learned`: it is in a DNS answer the sandbox's
    resolver gave for an allowed name (it opens only globally reachable addresses)."""
    ip = ipaddress.IPv4Address(address)
    special = special_ranges.special_range(ip)
    if special is not None and special.never:
        return Decision(False, f"built-in: {special.name}",
                        f"{address} is {special.name}, which no rule opens")
    named = _network_rule(policy.allow_out, ip, policy.allow)
    if named is not None and (special is None or any(
            ip in ipaddress.IPv4Network(n) for n in policy.private_allow)):
        return Decision(True, f"allow_out{named}", f"allow_out names {address}")
    if special is not None:
        return Decision(False, f"built-in: {special.name}",
                        f"{address} is {special.name}, which opens only where allow_out "
                        "names it")
    if learned:
        return Decision(True, "allow_out (DNS answer)",
                        f"{address} was answered for a name allow_out allows")
    denied = _network_rule(policy.deny_out, ip, policy.deny)
    if denied is not None:
        return Decision(False, f"deny_out{denied}", f"deny_out denies {address}")
    return default(policy, address)


def usable_answer(policy: EgressPolicy, address: str) -> bool:
    """May the gateway connect to `address`, an answer for a name the policy allowed?
    Only globally reachable addresses, or special-use ones allow_out names (as the
    resolver learns them: an allowed name never opens the app's database)."""
    return by_address(policy, address, learned=True).allowed
