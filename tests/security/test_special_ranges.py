"""Issue 11 item 4: one list of special-use (non-global) ranges for the SSRF guard and
the sandbox egress rules.

Every range of IANA's special-purpose registries that is not globally reachable is
refused by the outbound URL guard and dropped by a sandbox's built-in egress denies,
and a DNS answer inside it is never learned. Both open it the same way: the guard when
private endpoints are allowed, the egress rules when `allow_out` names (part of) it;
link-local, metadata, unspecified, multicast and reserved ranges never open.

The egress verdicts come from the nftables script a sandbox really gets, read by a small
evaluator of the rule kinds nft.py writes (the engine tests in
tests/backends/test_egress.py send real packets at two of these ranges).
"""

from __future__ import annotations

import ipaddress
import re

import pytest

from app.backends.base import ResolvedNetworkPolicy
from app.backends.docker.egress import nft
from app.backends.docker.egress.policy import EgressPolicy, SandboxNet, learnable
from app.security import special_ranges
from app.security.ssrf import UnsafeURL, check_url, is_never_allowed, is_public_address

NEVER, NAMED = "never", "named"  # never opened / opened by the opt-in or by naming it

# (range, which opt-in opens it): IANA IPv4 and IPv6 special-purpose registries, the
# entries not globally reachable, plus multicast and deprecated site-local IPv6.
RANGES = [
    ("0.0.0.0/8", NEVER), ("10.0.0.0/8", NAMED), ("100.64.0.0/10", NAMED),
    ("127.0.0.0/8", NAMED), ("169.254.0.0/16", NEVER), ("172.16.0.0/12", NAMED),
    ("192.0.0.0/24", NAMED), ("192.0.2.0/24", NAMED), ("192.88.99.0/24", NAMED),
    ("192.168.0.0/16", NAMED), ("198.18.0.0/15", NAMED), ("198.51.100.0/24", NAMED),
    ("203.0.113.0/24", NAMED), ("224.0.0.0/4", NEVER), ("240.0.0.0/4", NEVER),
    ("255.255.255.255/32", NEVER),
    ("::/128", NEVER), ("::1/128", NAMED), ("64:ff9b:1::/48", NAMED), ("100::/64", NAMED),
    ("2001::/23", NAMED), ("2001:db8::/32", NAMED), ("3fff::/20", NAMED),
    ("5f00::/16", NAMED), ("fc00::/7", NAMED), ("fd00:ec2::254/128", NEVER),
    ("fe80::/10", NEVER), ("fec0::/10", NAMED), ("ff00::/8", NEVER),
]
# Globally reachable, for contrast: public unicast, and registry entries marked global.
GLOBAL = ["8.8.8.8", "1.1.1.1", "192.31.196.10", "192.175.48.6", "192.0.3.1", "198.20.0.1",
          "203.0.114.1", "2606:4700::1111", "2620:4f:8000::1", "::ffff:8.8.8.8",
          "2002:808:808::1", "64:ff9b::808:808"]


def samples(cidr: str) -> list[str]:
    """First, a middle and the last address of a range."""
    net = ipaddress.ip_network(cidr)
    return sorted({str(net[0]), str(net[net.num_addresses // 2]), str(net[-1])})


def url(address: str) -> str:
    return f"http://[{address}]/" if ":" in address else f"http://{address}/"


def egress_verdict(address: str, *, allow: tuple[str, ...] = ()) -> str:
    """"drop" or "pass" for a new connection from an open-policy sandbox to `address`,
    by the rules of the nft script the sandbox gets (sets filled from the same script)."""
    policy = EgressPolicy.from_resolved(ResolvedNetworkPolicy(allow_out=allow))
    script = nft.sandbox_script(SandboxNet("0123456789", "10.213.0.0/28", "10.213.0.1", None,
                                           policy))
    sets = {m.group(1): m.group(2) for m in re.finditer(
        r"add set inet sandlot (sb_\w+) \{[^}]*?(?:elements = \{ ([^}]*) \})?; \}", script)}
    ip = ipaddress.ip_address(address)
    for line in script.splitlines():
        if not line.startswith("add rule inet sandlot sb_0123456789_out "):
            continue
        rule = line.split(" sb_0123456789_out ", 1)[1]
        if rule == "ct state established,related return":
            continue
        if rule == "meta nfproto != ipv4 counter drop":
            if ip.version != 4:
                return "drop"
            continue
        if rule == "counter drop":
            return "drop"
        match = re.fullmatch(r"ip daddr (\{ (.*) \}|@(sb_\w+)) (counter drop|return)", rule)
        assert match, f"the evaluator does not know the rule {rule!r}"
        elements = match.group(2) if match.group(2) is not None else sets[match.group(3)]
        if elements and any(ip in ipaddress.ip_network(e.strip())
                            for e in elements.split(",")):
            return "drop" if match.group(4) == "counter drop" else "pass"
    return "pass"


@pytest.mark.parametrize(("cidr", "opened_by"), RANGES, ids=[r for r, _ in RANGES])
def test_the_guard_and_the_egress_rules_refuse_every_special_use_range(cidr, opened_by):
    for address in samples(cidr):
        assert not is_public_address(address), address
        with pytest.raises(UnsafeURL):
            check_url(url(address), allow_private=False)
        assert is_never_allowed(address) is (opened_by == NEVER), address
        if opened_by == NEVER:
            with pytest.raises(UnsafeURL, match="never reachable"):
                check_url(url(address), allow_private=True)
        else:
            check_url(url(address), allow_private=True)
        # The egress rules, from an open-policy sandbox and from one naming the range.
        assert not learnable(address), address
        assert egress_verdict(address) == "drop", address
        assert egress_verdict(address, allow=("0.0.0.0/0",)) == "drop", address
        if ipaddress.ip_network(cidr).version == 4:
            named = egress_verdict(address, allow=(cidr,))
            assert named == ("drop" if opened_by == NEVER else "pass"), address


@pytest.mark.parametrize("address", [
    "::ffff:198.18.0.1", "::ffff:192.0.2.1", "::ffff:240.0.0.1", "2002:c612:1::",
    "64:ff9b::c000:201", "64:ff9b::7f00:1"])
def test_ipv6_forms_embedding_a_special_use_ipv4_address_are_refused(address):
    assert not is_public_address(address)
    with pytest.raises(UnsafeURL):
        check_url(url(address), allow_private=False)


@pytest.mark.parametrize("address", GLOBAL)
def test_globally_reachable_addresses_pass_both(address):
    assert is_public_address(address) and not is_never_allowed(address)
    check_url(url(address), allow_private=False)
    if ipaddress.ip_address(address).version == 4:
        assert learnable(address)
        assert egress_verdict(address) == "pass"


@pytest.mark.parametrize("address", ["::7f00:1", "::808:808", "4000::1", "e000::1",
                                     "::ffff:0.0.0.1"])
def test_reserved_ipv6_outside_global_unicast_is_never_reachable(address):
    assert is_never_allowed(address) and not is_public_address(address)
    with pytest.raises(UnsafeURL, match="never reachable"):
        check_url(url(address), allow_private=True)


def test_the_list_covers_what_the_standard_library_calls_non_global():
    """A second opinion: Python's own table of non-global networks (3.11: the IANA
    registries of its time) holds nothing our list lets through. IPv4-mapped addresses
    are judged by the address they carry, so ::ffff:8.8.8.8 stays public."""
    constants = [ipaddress._IPv4Constants, ipaddress._IPv6Constants]  # noqa: SLF001
    networks = [n for c in constants for n in c._private_networks]  # noqa: SLF001
    networks += [ipaddress._IPv4Constants._reserved_network]  # noqa: SLF001
    networks += ipaddress._IPv6Constants._reserved_networks  # noqa: SLF001
    assert len(networks) > 20
    for net in networks:
        if net == ipaddress.ip_network("::ffff:0:0/96"):
            continue
        for address in samples(str(net)):
            assert special_ranges.is_special(address), (net, address)


def test_nft_denies_are_the_lists_ipv4_ranges():
    listed = [r.network for r in special_ranges.SPECIAL_RANGES if r.network.version == 4]
    from app.backends.docker.egress.policy import NEVER, PRIVATE

    denied = [ipaddress.ip_network(n) for n in NEVER + PRIVATE]
    assert list(ipaddress.collapse_addresses(listed)) == list(
        ipaddress.collapse_addresses(denied))
