"""One network-policy entry (reference 4.2 rule 3): an IPv4 address, an IPv4 CIDR or a
domain (optionally a wildcard), in its canonical spelling. The same classifier serves
allow_out, deny_out, cube rule hosts/SNIs and e2b host rules."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

Kind = Literal["ip", "domain"]


class TargetError(ValueError):
    """An entry that is not a valid IPv4, IPv4 CIDR or domain."""


@dataclass(frozen=True)
class Target:
    key: str  # canonical spelling: "1.2.3.4/32", "10.0.0.0/8", "example.com", "*.example.com"
    kind: Kind
    wildcard: bool = False

    @property
    def is_deny_all(self) -> bool:
        return self.kind == "ip" and self.key.endswith("/0")


def classify(entry: str, *, wildcard_ok: bool) -> Target:
    """Classify one policy entry into its canonical key (reference 4.2 rule 3)."""
    value = entry.strip()
    if not value:
        raise TargetError("must not be empty")
    if any(ch in value for ch in " \t"):
        raise TargetError("must not contain spaces")
    if "/" in value:
        return _cidr(value)
    ip = _ip(value)
    if ip is not None:
        return Target(f"{ip}/32", "ip")
    return _domain(value, wildcard_ok)


def _ip(value: str) -> ipaddress.IPv4Address | None:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return None
    if address.version == 6:
        raise TargetError("IPv6 addresses are not supported")
    return address


def _cidr(value: str) -> Target:
    address, _, prefix = value.partition("/")
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        network = None
    if network is None or not prefix.isdigit():
        if ":" in address:
            raise TargetError("IPv6 ranges are not supported")
        raise TargetError("is not a valid IPv4 CIDR")
    if network.version == 6:
        raise TargetError("IPv6 ranges are not supported")
    return Target(str(network), "ip")


def _domain(value: str, wildcard_ok: bool) -> Target:
    name = value.lower()
    name = name[:-1] if name.endswith(".") else name
    if ":" in name:
        raise TargetError("must not include a port or be an IPv6 address")
    wildcard = name.startswith("*.")
    if wildcard:
        if not wildcard_ok:
            raise TargetError("wildcards are not allowed here")
        name = name[2:]
    if name and set(name) <= set("0123456789."):
        raise TargetError("is not a valid IPv4 address")
    if not name or "*" in name:
        raise TargetError("a wildcard must be a single leading '*.' label")
    if name.startswith(".") or name.endswith(".") or ".." in name:
        raise TargetError("is not a valid domain (empty label)")
    labels = name.split(".")
    if len(labels) < 2:
        raise TargetError("a domain needs at least two labels, like example.com")
    for label in labels:
        if not LABEL.fullmatch(label):  # fullmatch: `$` would accept a trailing newline
            raise TargetError(f"label {label!r} must be 1-63 letters, digits or '-', "
                              "not starting or ending with '-'")
    return Target(f"*.{name}" if wildcard else name, "domain", wildcard)
