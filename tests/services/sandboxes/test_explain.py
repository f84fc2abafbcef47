"""Issue 24 item 4: "explain this destination": the verdict, the deciding rule and the
addresses a name has now, for every backend, from the same rules the validator checks
and Docker's firewall enforces (tests/backends/test_egress.py proves those on the real
engine: the cases below mirror them)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from dnslib import RR, DNSRecord
from dnslib.server import BaseResolver, DNSServer

from app.errors import ValidationFailed
from app.services.sandboxes.explain import explain, explain_unsaved
from tests.services.sandboxes.test_network_policy import VALID

ZONE = {"pypi.org": ["151.101.0.223"], "files.pypi.org": ["151.101.64.223"],
        "api.example.com": ["93.184.216.34"], "internal.example.com": ["10.1.2.3"],
        "rebind.example.com": ["127.0.0.1"], "two.example.com": ["10.9.9.9", "93.184.216.35"],
        "a.example.com": ["93.184.216.36"]}


class Zone(BaseResolver):
    def resolve(self, request: DNSRecord, handler) -> DNSRecord:
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        for address in ZONE.get(name, []):
            reply.add_answer(*RR.fromZone(f"{name}. 60 A {address}"))
        return reply


@pytest.fixture(scope="module")
def dns() -> Iterator[str]:
    server = DNSServer(Zone(), port=0, address="127.0.0.1")
    server.start_thread()
    port = server.server.server_address[1]
    yield f"127.0.0.1:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def upstream(dns, monkeypatch):
    monkeypatch.setenv("SANDBOX_DNS_UPSTREAM", dns)


DENY = {"deny_egress_by_default": True}


def docker(network=None, **docker_block):
    return {"sandbox_type": "docker", "network": network or {}, "docker": docker_block}


def remote(kind, network):
    return {"sandbox_type": kind, "network": network}


# (config document, host, verdict, rule) - 20 and more cases, each an enforcement rule
CASES = [
    pytest.param(docker(), "api.example.com", "allowed", "default allow", id="open-default"),
    pytest.param(docker({**DENY}), "api.example.com", "denied", "default deny",
                 id="deny-by-default"),
    pytest.param(docker({"deny_out": ["0.0.0.0/0"], "allow_out": ["pypi.org"]}),
                 "api.example.com", "denied", "deny_out[0] 0.0.0.0/0", id="deny-all-by-cidr"),
    pytest.param(docker({**DENY, "allow_out": ["pypi.org"]}), "pypi.org", "allowed",
                 "allow_out[0] pypi.org", id="exact-name"),
    pytest.param(docker({**DENY, "allow_out": ["*.pypi.org"]}), "files.pypi.org", "allowed",
                 "allow_out[0] *.pypi.org", id="wildcard-subdomain"),
    pytest.param(docker({**DENY, "allow_out": ["*.pypi.org"]}), "pypi.org", "denied",
                 "default deny", id="wildcard-not-the-apex"),
    pytest.param(docker({**DENY, "allow_out": ["PyPI.org."]}), "pypi.org", "allowed",
                 "allow_out[0] PyPI.org.", id="entry-spelling-kept-in-the-rule"),
    pytest.param(docker({"deny_out": ["93.184.216.34"]}), "93.184.216.34", "denied",
                 "deny_out[0] 93.184.216.34", id="deny-ip"),
    pytest.param(docker({"deny_out": ["93.184.216.0/24"]}), "api.example.com", "denied",
                 "deny_out[0] 93.184.216.0/24", id="deny-cidr-decides-a-name-by-address"),
    pytest.param(docker({"allow_out": ["93.184.216.34"], "deny_out": ["93.184.216.0/24"]}),
                 "93.184.216.34", "allowed", "allow_out[0] 93.184.216.34",
                 id="allow-wins-over-deny"),
    pytest.param(docker({**DENY, "allow_out": ["93.184.216.0/24"]}), "93.184.216.9",
                 "allowed", "allow_out[0] 93.184.216.0/24", id="cidr-allow-for-plain-tcp"),
    pytest.param(docker(), "169.254.169.254", "denied", "built-in: link-local (cloud metadata)",
                 id="metadata-never"),
    pytest.param(docker({"allow_out": ["169.254.169.254"]}), "169.254.169.254", "denied",
                 "built-in: link-local (cloud metadata)", id="metadata-never-even-named"),
    pytest.param(docker(), "10.1.2.3", "denied", "built-in: private-use",
                 id="private-closed-when-open"),
    pytest.param(docker({"allow_out": ["0.0.0.0/0"]}), "10.1.2.3", "denied",
                 "built-in: private-use", id="broad-allow-opens-no-private-range"),
    pytest.param(docker({"allow_out": ["10.1.0.0/16"]}), "10.1.2.3", "allowed",
                 "allow_out[0] 10.1.0.0/16", id="private-opens-when-named"),
    pytest.param(docker({**DENY, "allow_out": ["rebind.example.com"]}), "rebind.example.com",
                 "denied", "built-in: loopback", id="allowed-name-to-loopback-not-opened"),
    pytest.param(docker({**DENY, "allow_out": ["two.example.com"]}), "two.example.com",
                 "allowed", "allow_out[0] two.example.com", id="allowed-name-public-answer-opens"),
    pytest.param(docker({}, network_mode="none"), "api.example.com", "denied",
                 "docker.network_mode none", id="no-network"),
    pytest.param(docker(), "unknown.example.com", "unresolved", "addresses decide",
                 id="open-and-unresolvable"),
    pytest.param(remote("e2b", {"allow_out": ["1.2.3.4"], "deny_out": ["0.0.0.0/0"]}),
                 "1.2.3.4", "allowed", "allow_out[0] 1.2.3.4", id="e2b-allow-ip"),
    pytest.param(remote("e2b", {}), "10.1.2.3", "allowed", "default allow",
                 id="e2b-private-is-the-providers"),
    pytest.param(remote("cube", {"cube_rules": [{"name": "no-a", "host": "a.example.com",
                                                 "deny": True}]}),
                 "a.example.com", "denied", "cube_rules[0] no-a", id="cube-deny-rule"),
    pytest.param(remote("cube", {**DENY, "cube_rules": [{"name": "sni", "sni": "*.example.com"}]}),
                 "a.example.com", "allowed", "cube_rules[0] sni", id="cube-sni-wildcard"),
]


@pytest.mark.parametrize(("doc", "host", "verdict", "rule"), CASES)
def test_the_verdict_and_the_deciding_rule(doc, host, verdict, rule):
    answer = explain(doc, host, 443)
    assert (answer["verdict"], answer["rule"]) == (verdict, rule), answer
    assert answer["reason"].endswith(".") and answer["port"] == 443
    # People read the reason: the form's labels, never the document's keys (issue 27.4).
    assert not re.search(r"allow_out|deny_out|deny_egress_by_default", answer["reason"])


def test_the_answer_carries_the_addresses_with_their_own_verdicts():
    answer = explain(docker({"allow_out": ["10.9.0.0/16"]}), "two.example.com")
    assert [(a["address"], a["range"], a["verdict"], a["rule"])
            for a in answer["addresses"]] == [
        (None, "private-use", "allowed", "allow_out[0] 10.9.0.0/16"),
        ("93.184.216.35", None, "allowed", "default allow")]
    # what the deployment's resolver knows of internal names stays the deployment's
    assert "10.9.9.9" not in str(answer)
    assert answer["note"] is None and answer["resolution"] is None
    assert "own network" in explain(remote("e2b", {}), "pypi.org")["note"]


@pytest.mark.parametrize(("network", "backend"), VALID)
def test_every_policy_of_the_validators_table_explains_each_of_its_entries(network, backend):
    """Every entry of every valid policy: the rule named is that entry, a default, a
    built-in range or a cube rule, at the index where the policy has it."""
    doc = {"sandbox_type": backend, "network": network or {}}
    entries = {f"{key}[{i}] {raw.strip()}" for key in ("allow_out", "deny_out")
               for i, raw in enumerate((network or {}).get(key) or [])}
    names = {r.get("name") for r in (network or {}).get("cube_rules") or []}
    hosts = ["93.184.216.34", "10.1.2.3", "pypi.org"] + [
        raw.strip().removeprefix("*.").split("/")[0]
        for raw in (network or {}).get("allow_out") or []]
    for host in hosts:
        answer = explain(doc, host)
        rule = answer["rule"]
        assert rule in entries or rule.startswith(("default ", "built-in: ", "cube_rules[")) \
            or rule == "addresses decide", (host, answer)
        if rule.startswith("cube_rules["):
            assert rule.split(" ", 1)[1] in names


@pytest.mark.parametrize(("host", "field"), [
    ("", "host"), ("exa mple.com", "host"), ("*.example.com", "host"), ("10.0.0.0/8", "host"),
    ("::1", "host"), (None, "host")])
def test_a_bad_host_is_a_field_error(host, field):
    with pytest.raises(ValidationFailed) as err:
        explain(docker(), host)
    assert [e["field"] for e in err.value.errors] == [field]


@pytest.mark.parametrize("port", [0, 65536, "443", True, 1.5])
def test_a_bad_port_is_a_field_error(port):
    with pytest.raises(ValidationFailed) as err:
        explain(docker(), "pypi.org", port)
    assert err.value.errors[0]["field"] == "port"


def test_an_unsaved_policy_is_validated_as_a_save_would():
    with pytest.raises(ValidationFailed) as err:
        explain_unsaved({"sandbox_type": "docker", "network": {"allow_out": ["pypi.org"]}},
                        "pypi.org")
    assert err.value.errors[0]["field"] == "config.network.allow_out"
    answer = explain_unsaved({"sandbox_type": "docker", "network": {
        **DENY, "allow_out": ["pypi.org"]}}, "pypi.org")
    assert answer["verdict"] == "allowed"
    with pytest.raises(ValidationFailed):
        explain_unsaved({"sandbox_type": "mainframe"}, "pypi.org")


def test_no_upstream_or_no_answer_says_so(monkeypatch):
    monkeypatch.setenv("SANDBOX_DNS_UPSTREAM", "127.0.0.1:9")  # a closed port
    answer = explain(docker({**DENY, "allow_out": ["pypi.org"]}), "pypi.org")
    assert answer["verdict"] == "allowed" and answer["addresses"] == []
    assert answer["resolution"] == "the name could not be looked up now"


def test_the_lookup_answers_within_its_timeout(monkeypatch):
    import socket
    import time

    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # takes queries, never answers
    silent.bind(("127.0.0.1", 0))
    monkeypatch.setenv("SANDBOX_DNS_UPSTREAM", f"127.0.0.1:{silent.getsockname()[1]}")
    started = time.monotonic()
    try:
        answer = explain(docker(), "pypi.org")
    finally:
        silent.close()
    assert time.monotonic() - started < 3
    assert answer["verdict"] == "unresolved"
