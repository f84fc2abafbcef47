"""Egress settings, from the environment (the resolver is a separate process; both must agree):
  SANDBOX_EGRESS_STATE_DIR  state files, resolver pid/lock/log (default instance/egress)
  SANDBOX_DNS_UPSTREAM      ip[:port] the resolver forwards allowed names to
                            (default: the first IPv4 nameserver of /etc/resolv.conf)
  SANDBOX_EGRESS_SUBNETS    IPv4 pool the sandbox networks' /28s come from
                            (default 10.213.0.0/16; must not overlap the host's networks)
  SANDBOX_EGRESS_GATEWAY_PORT  the egress gateway's port on each sandbox's gateway address
                            (default 15001; nothing else may listen there)
  SANDBOX_EGRESS_GATEWAY_MARK  a firewall mark (SO_MARK) on the gateway's upstream
                            connections, for policy routing of sandbox egress (default none)
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from app.backends.base import BackendError

ROOT = Path(__file__).resolve().parents[4]
DEFAULT_STATE_DIR = ROOT / "instance" / "egress"
DEFAULT_SUBNETS = "10.213.0.0/16"
DEFAULT_GATEWAY_PORT = 15001
SUBNET_PREFIX = 28


def _resolv_conf_nameserver(path: str = "/etc/resolv.conf") -> str | None:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            try:
                if ipaddress.ip_address(parts[1]).version == 4:
                    return parts[1]
            except ValueError:
                continue
    return None


def _upstream(raw: str | None) -> str | None:
    """"ip" or "ip:port" -> "ip:port"."""
    if not raw:
        return None
    host, _, port = raw.strip().rpartition(":")
    if not host:
        host, port = raw.strip(), "53"
    try:
        ipaddress.IPv4Address(host)
        if not 0 < int(port) < 65536:
            raise ValueError(port)
    except ValueError:
        raise BackendError(f"SANDBOX_DNS_UPSTREAM must be an IPv4 address with an optional "
                           f"port, not {raw!r}") from None
    return f"{host}:{port}"


@dataclass(frozen=True)
class EgressSettings:
    state_dir: Path
    upstream: str | None
    subnets: ipaddress.IPv4Network
    gateway_port: int = DEFAULT_GATEWAY_PORT
    gateway_mark: int | None = None

    @classmethod
    def from_env(cls) -> EgressSettings:
        state_dir = Path(os.environ.get("SANDBOX_EGRESS_STATE_DIR") or DEFAULT_STATE_DIR)
        if not state_dir.is_absolute():
            state_dir = ROOT / state_dir
        upstream = _upstream(os.environ.get("SANDBOX_DNS_UPSTREAM")
                             or _resolv_conf_nameserver())
        raw_pool = os.environ.get("SANDBOX_EGRESS_SUBNETS") or DEFAULT_SUBNETS
        try:
            pool = ipaddress.IPv4Network(raw_pool)
        except ValueError:
            raise BackendError(f"SANDBOX_EGRESS_SUBNETS must be an IPv4 CIDR, "
                               f"not {raw_pool!r}") from None
        if pool.prefixlen > SUBNET_PREFIX:
            raise BackendError(f"SANDBOX_EGRESS_SUBNETS must be /{SUBNET_PREFIX} or larger")
        return cls(state_dir=state_dir, upstream=upstream, subnets=pool,
                   gateway_port=_number("SANDBOX_EGRESS_GATEWAY_PORT", DEFAULT_GATEWAY_PORT,
                                        1, 65535),
                   gateway_mark=_number("SANDBOX_EGRESS_GATEWAY_MARK", None, 1, 2**32 - 1))


def _number(key: str, fallback: int | None, low: int, high: int) -> int | None:
    raw = (os.environ.get(key) or "").strip()
    if not raw:
        return fallback
    try:
        value = int(raw, 0)
    except ValueError:
        value = -1
    if not low <= value <= high:
        raise BackendError(f"{key} must be a whole number from {low} to {high}, not {raw!r}")
    return value
