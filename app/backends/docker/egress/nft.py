"""The nftables side: our own `table inet sandlot`, never Docker's tables.

Two base chains hook forward and input at priority filter - 10, before Docker's
iptables-nft chains. An `accept` here would not override a drop there (nor the
reverse), so our chains only ever add drops: `return` means "not our business".
The base chains dispatch on the interface through verdict maps, one element per
sandbox bridge, so a sandbox is added or removed without touching rule handles:

    forward: iifname vmap @out_iface   -> sb_<id>_out   what the sandbox may reach
             oifname vmap @in_iface    -> sb_<id>_in    no new connections into it
    input:   iifname vmap @host_iface  -> sb_<id>_host  the host: DNS to the resolver and
                                                          redirected TCP to the gateway only
    prerouting (nat, dstnat - 10): iifname vmap @nat_iface -> sb_<id>_nat  every TCP
             connection but to the host itself redirected to the egress gateway
             (gateway.py), which decides it by name

Per sandbox, four named sets: sb_<id>_allow (allow_out CIDRs), sb_<id>_private
(the allow_out entries inside special-use ranges, policy.PRIVATE: the name predates the
wider list and stays so that existing sandboxes' sets are still found), sb_<id>_deny
(deny_out CIDRs) and
sb_<id>_dns (IPs learned from DNS answers, each with the record's TTL as timeout).

Every change is one `nft -f -` transaction: all of it applies or none does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable

from app.backends.base import BackendError
from app.backends.docker.egress.policy import NEVER, PRIVATE, SandboxNet

TABLE = "inet sandlot"
NFT_TIMEOUT_SEC = 10
NFT = shutil.which("nft", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
_ID_IN_NAME = re.compile(r"^sb_([0-9a-f]{10})_")
_MAPS = ("out_iface", "in_iface", "host_iface", "nat_iface")
_SETS = ("allow", "private", "deny", "dns")
_CHAINS = ("out", "in", "host", "nat")

BASE = f"""\
add table {TABLE}
add map {TABLE} out_iface {{ type ifname : verdict; }}
add map {TABLE} in_iface {{ type ifname : verdict; }}
add map {TABLE} host_iface {{ type ifname : verdict; }}
add map {TABLE} nat_iface {{ type ifname : verdict; }}
add chain {TABLE} forward {{ type filter hook forward priority filter - 10; policy accept; }}
add chain {TABLE} input {{ type filter hook input priority filter - 10; policy accept; }}
add chain {TABLE} prerouting {{ type nat hook prerouting priority dstnat - 10; policy accept; }}
flush chain {TABLE} forward
flush chain {TABLE} input
flush chain {TABLE} prerouting
add rule {TABLE} forward iifname vmap @out_iface
add rule {TABLE} forward oifname vmap @in_iface
add rule {TABLE} input iifname vmap @host_iface
add rule {TABLE} prerouting iifname vmap @nat_iface
"""


class NftError(BackendError):
    pass


def run(script: str) -> str:
    """Apply `script` as one transaction; its stdout on success."""
    try:
        done = subprocess.run([NFT or "nft", "-f", "-"], input=script, capture_output=True,
                              text=True, timeout=NFT_TIMEOUT_SEC, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NftError(f"nft failed: {exc}") from None
    if done.returncode != 0:
        raise NftError(f"nft refused the egress rules: {done.stderr.strip()[:500]}")
    return done.stdout


def _elements(values: Iterable[str]) -> str:
    values = list(values)
    return f" elements = {{ {', '.join(values)} }};" if values else ""


def sandbox_script(net: SandboxNet) -> str:
    """The base table (idempotent) plus everything for one sandbox, as one transaction."""
    p, s, br = net.policy, f"sb_{net.id}", f'"{net.bridge}"'
    lines = [
        BASE,
        f"add set {TABLE} {s}_allow {{ type ipv4_addr; flags interval;{_elements(p.allow)} }}",
        f"add set {TABLE} {s}_private {{ type ipv4_addr; flags interval;"
        f"{_elements(p.private_allow)} }}",
        f"add set {TABLE} {s}_deny {{ type ipv4_addr; flags interval;{_elements(p.deny)} }}",
        f"add set {TABLE} {s}_dns {{ type ipv4_addr; flags timeout; }}",
        f"add chain {TABLE} {s}_out",
        *_out_rules(net),
        f"add chain {TABLE} {s}_in",
        f"add rule {TABLE} {s}_in ct state established,related return",
        f"add rule {TABLE} {s}_in counter drop",
        f"add chain {TABLE} {s}_host",
        f"add rule {TABLE} {s}_host ip daddr {net.gateway} udp dport 53 return",
        f"add rule {TABLE} {s}_host ip daddr {net.gateway} tcp dport 53 return",
        *([f"add rule {TABLE} {s}_host ip daddr {net.gateway} tcp dport {net.gateway_port} "
           "ct status dnat return"] if net.gateway_port else []),
        f"add rule {TABLE} {s}_host ct state established,related return",
        f"add rule {TABLE} {s}_host counter drop",
        # TCP goes to the gateway (gateway.py), but to the host itself (refused above)
        # and to the gateway address (DNS); without a gateway port, nft decides alone.
        f"add chain {TABLE} {s}_nat",
        f"add rule {TABLE} {s}_nat ip daddr {net.gateway} return",
        f"add rule {TABLE} {s}_nat fib daddr type local return",
        *([f"add rule {TABLE} {s}_nat meta nfproto ipv4 meta l4proto tcp "
           f"redirect to :{net.gateway_port}"] if net.gateway_port else []),
        f"add element {TABLE} nat_iface {{ {br} : jump {s}_nat }}",
        f"add element {TABLE} out_iface {{ {br} : jump {s}_out }}",
        f"add element {TABLE} in_iface {{ {br} : jump {s}_in }}",
        f"add element {TABLE} host_iface {{ {br} : jump {s}_host }}",
    ]
    return "\n".join(lines) + "\n"


def _out_rules(net: SandboxNet) -> list[str]:
    """What the sandbox may reach: its chain's rules, in the order of decisions."""
    s = f"sb_{net.id}"
    rules = [
        f"add rule {TABLE} {s}_out ct state established,related return",
        f"add rule {TABLE} {s}_out meta nfproto != ipv4 counter drop",
        f"add rule {TABLE} {s}_out ip daddr {{ {', '.join(NEVER)} }} counter drop",
        f"add rule {TABLE} {s}_out ip daddr @{s}_private return",
        f"add rule {TABLE} {s}_out ip daddr {{ {', '.join(PRIVATE)} }} counter drop",
        f"add rule {TABLE} {s}_out ip daddr @{s}_allow return",
        f"add rule {TABLE} {s}_out ip daddr @{s}_dns return",
        f"add rule {TABLE} {s}_out ip daddr @{s}_deny counter drop",
    ]
    if net.policy.deny_all:
        rules.append(f"add rule {TABLE} {s}_out counter drop")
    return rules


def policy_script(net: SandboxNet) -> str:
    """A running sandbox's policy replaced in one transaction: its address sets and its
    out chain anew. Connections already open stay open; the learned addresses (the
    `_dns` set) keep their timeouts."""
    p, s = net.policy, f"sb_{net.id}"
    lines = []
    for name, values in (("allow", p.allow), ("private", p.private_allow), ("deny", p.deny)):
        lines.append(f"flush set {TABLE} {s}_{name}")
        if values:
            lines.append(f"add element {TABLE} {s}_{name} {{ {', '.join(values)} }}")
    lines += [f"flush chain {TABLE} {s}_out", *_out_rules(net)]
    return "\n".join(lines) + "\n"


def apply(net: SandboxNet) -> None:
    run(sandbox_script(net))


def learn_script(net_id: str, ips: dict[str, int]) -> str:
    """Add learned IPs with their timeouts (seconds). add + delete + add refreshes the
    timeout of an IP already there, in one transaction."""
    name = f"{TABLE} sb_{net_id}_dns"
    lines = []
    for ip, timeout in sorted(ips.items()):
        lines += [f"add element {name} {{ {ip} timeout {timeout}s }}",
                  f"delete element {name} {{ {ip} }}",
                  f"add element {name} {{ {ip} timeout {timeout}s }}"]
    return "\n".join(lines) + "\n"


def learn(net_id: str, ips: dict[str, int]) -> None:
    if ips:
        run(learn_script(net_id, ips))


def _table() -> list[dict]:
    """Our table as nft JSON objects; [] when it does not exist yet."""
    try:
        done = subprocess.run([NFT or "nft", "-j", "list", "table", *TABLE.split()],
                              capture_output=True, text=True, timeout=NFT_TIMEOUT_SEC,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NftError(f"nft failed: {exc}") from None
    if done.returncode != 0:
        if "No such file or directory" in done.stderr:
            return []
        raise NftError(f"nft list failed: {done.stderr.strip()[:500]}")
    return json.loads(done.stdout).get("nftables", [])


def _objects() -> dict[str, set[str]]:
    """Names of our sets and chains, and bridges in the maps, per kind."""
    found: dict[str, set[str]] = {"set": set(), "chain": set(), **{m: set() for m in _MAPS}}
    for item in _table():
        for kind in ("set", "chain"):
            if kind in item:
                found[kind].add(item[kind]["name"])
        if "map" in item and item["map"]["name"] in _MAPS:
            for elem in item["map"].get("elem") or ():
                if isinstance(elem, list) and elem and isinstance(elem[0], str):
                    found[item["map"]["name"]].add(elem[0])
    return found


def sandbox_ids() -> set[str]:
    """Egress ids that have any set, chain or map element in our table."""
    found = _objects()
    ids = {m.group(1) for name in found["set"] | found["chain"]
           if (m := _ID_IN_NAME.match(name))}
    ids |= {name[3:] for m in _MAPS for name in found[m] if name.startswith("sl-")}
    return ids


def has_sandbox(net_id: str) -> bool:
    found = _objects()
    return all(f"sb_{net_id}_{c}" in found["chain"] for c in _CHAINS) and all(
        f"sl-{net_id}" in found[m] for m in _MAPS)


def remove(net_id: str) -> None:
    """Delete whatever exists of one sandbox's objects (map elements first, so the chains
    are no longer referenced), in one transaction. Nothing there is success."""
    for attempt in (1, 2):  # a concurrent remove may win the race between list and delete
        found = _objects()
        s, bridge = f"sb_{net_id}", f"sl-{net_id}"
        lines = [f'delete element {TABLE} {m} {{ "{bridge}" }}'
                 for m in _MAPS if bridge in found[m]]
        lines += [f"delete chain {TABLE} {s}_{c}" for c in _CHAINS
                  if f"{s}_{c}" in found["chain"]]
        lines += [f"delete set {TABLE} {s}_{k}" for k in _SETS if f"{s}_{k}" in found["set"]]
        if not lines:
            return
        try:
            run("\n".join(lines) + "\n")
            return
        except NftError:
            if attempt == 2:
                raise


def learned(net_id: str) -> set[str]:
    """The IPs currently in a sandbox's DNS-learned set (for tests and operators)."""
    for item in _table():
        if "set" in item and item["set"]["name"] == f"sb_{net_id}_dns":
            elems = item["set"].get("elem") or ()
            return {e["elem"]["val"] if isinstance(e, dict) else e for e in elems}
    return set()


def available() -> str | None:
    """None when we can manage nftables here, else why not."""
    try:
        done = subprocess.run([NFT or "nft", "list", "tables"], capture_output=True, text=True,
                              timeout=NFT_TIMEOUT_SEC, check=False)
    except FileNotFoundError:
        return "nft (nftables) is not installed"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"nft does not run: {exc}"
    if done.returncode != 0:
        return f"nft cannot list the ruleset: {done.stderr.strip()[:200]}"
    return None
