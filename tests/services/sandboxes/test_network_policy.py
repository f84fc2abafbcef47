"""Network policy (reference 4.2 rules 1-9, decisions 5): a case table taken from the
reference text, canonical deny-all handling, and properties of the classifier and the
validator. Pure functions: no database, no network."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.services.sandboxes.network_policy import (
    DENY_ALL,
    Problems,
    canonical_deny_out,
    denies_by_default,
    validate,
)
from app.services.sandboxes.targets import TargetError, classify

LABEL63 = "a" * 63
LABEL64 = "a" * 64


# -- rule 3: the classifier ----------------------------------------------------------------

ACCEPT = [
    # (entry, wildcard_ok, key, kind)
    pytest.param("1.2.3.4", True, "1.2.3.4/32", "ip", id="r3.3-ipv4-becomes-/32"),
    pytest.param("  1.2.3.4\t", True, "1.2.3.4/32", "ip", id="r3.1-trimmed-first"),
    pytest.param("10.1.2.3/8", True, "10.0.0.0/8", "ip", id="r3.4-cidr-normalised"),
    pytest.param("192.168.1.77/24", True, "192.168.1.0/24", "ip", id="r3.4-cidr-host-bits-dropped"),
    pytest.param("1.2.3.4/32", True, "1.2.3.4/32", "ip", id="r3.4-cidr-/32-kept"),
    pytest.param("1.2.3.4/0", False, "0.0.0.0/0", "ip", id="r3.4-any-/0-is-0.0.0.0/0"),
    pytest.param("Example.COM", True, "example.com", "domain", id="r3.5-domain-lowercased"),
    pytest.param("example.com.", True, "example.com", "domain",
                 id="r3.5-one-trailing-dot-stripped"),
    pytest.param("*.Example.com", True, "*.example.com", "domain", id="r3.5-wildcard-allowed"),
    pytest.param("*.example.com.", True, "*.example.com", "domain",
                 id="r3.5-wildcard-trailing-dot"),
    pytest.param("a-b.example.com", True, "a-b.example.com", "domain", id="r3.5-inner-hyphen-ok"),
    pytest.param("xn--bcher-kva.example", True, "xn--bcher-kva.example", "domain",
                 id="r3.5-punycode-ok"),
    pytest.param(f"{LABEL63}.example.com", True, f"{LABEL63}.example.com", "domain",
                 id="r3.5-label-63-ok"),
    pytest.param("123.example.com", True, "123.example.com", "domain",
                 id="r3.5-digit-label-in-a-domain-ok"),
    pytest.param("example.com", False, "example.com", "domain", id="r5-plain-domain-classifies"),
]


@pytest.mark.parametrize(("entry", "wildcard_ok", "key", "kind"), ACCEPT)
def test_classify_accepts(entry, wildcard_ok, key, kind):
    target = classify(entry, wildcard_ok=wildcard_ok)
    assert (target.key, target.kind) == (key, kind)
    assert target.wildcard == key.startswith("*.")


REJECT = [
    # (entry, wildcard_ok, distinctive part of the message)
    pytest.param("", True, "must not be empty", id="r3.1-empty"),
    pytest.param("  \t ", True, "must not be empty", id="r3.1-blank"),
    pytest.param("exa mple.com", True, "spaces", id="r3.2-space-inside"),
    pytest.param("example\t.com", True, "spaces", id="r3.2-tab-inside"),
    pytest.param("::1", True, "IPv6", id="r3.3-ipv6-address"),
    pytest.param("fe80::1%eth0", True, "IPv6", id="r3.3-ipv6-scoped"),
    pytest.param("::ffff:1.2.3.4", True, "IPv6", id="r3.3-ipv4-mapped-is-ipv6-literal"),
    pytest.param("2001:db8::/32", True, "IPv6", id="r3.4-ipv6-cidr"),
    pytest.param("::/0", False, "IPv6", id="r3.4-ipv6-/0"),
    pytest.param("1.2.3.4/33", True, "not a valid IPv4 CIDR", id="r3.4-prefix-too-long"),
    pytest.param("10.0.0.0/255.0.0.0", True, "not a valid IPv4 CIDR", id="r3.4-netmask-form"),
    pytest.param("example.com:443", True, "port", id="r3.5-port"),
    pytest.param("1.2.3.4:80", True, "port", id="r3.5-ip-with-port"),
    pytest.param("*.example.com", False, "wildcards are not allowed", id="r3.5-wildcard-not-here"),
    pytest.param("*", True, "single leading '*.'", id="r3.5-bare-star"),
    pytest.param("*.", True, "single leading '*.'", id="r3.5-star-dot-empty-remainder"),
    pytest.param("*example.com", True, "single leading '*.'", id="r3.5-star-glued"),
    pytest.param("a.*.example.com", True, "single leading '*.'", id="r3.5-star-inside"),
    pytest.param("*.*.example.com", True, "single leading '*.'", id="r3.5-double-wildcard"),
    pytest.param("example.*", True, "single leading '*.'", id="r3.5-star-last"),
    pytest.param("1.2.3", True, "not a valid IPv4", id="r3.5-digits-and-dots"),
    pytest.param("999.1.1.1", True, "not a valid IPv4", id="r3.5-octet-too-big"),
    pytest.param("01.2.3.4", True, "not a valid IPv4", id="r3.5-leading-zero-octet"),
    pytest.param("*.1.2.3.4", True, "not a valid IPv4", id="r3.5-wildcard-over-digits"),
    pytest.param(".example.com", True, "empty label", id="r3.5-leading-dot"),
    pytest.param("example.com..", True, "empty label", id="r3.5-two-trailing-dots"),
    pytest.param("a..example.com", True, "empty label", id="r3.5-double-dot"),
    pytest.param("localhost", True, "two labels", id="r3.5-single-label"),
    pytest.param("com.", True, "two labels", id="r3.5-single-label-trailing-dot"),
    pytest.param(f"{LABEL64}.example.com", True, "1-63", id="r3.5-label-64"),
    pytest.param("-a.example.com", True, "1-63", id="r3.5-leading-hyphen"),
    pytest.param("a-.example.com", True, "1-63", id="r3.5-trailing-hyphen"),
    pytest.param("my_host.example.com", True, "1-63", id="r3.5-underscore"),
    pytest.param("a\n.example.com", True, "1-63", id="r3.5-newline-in-label"),
    pytest.param("bücher.example", True, "1-63", id="r3.5-non-ascii"),
    pytest.param("example.com/path", True, "not a valid IPv4 CIDR", id="r3.5-path"),
]


@pytest.mark.parametrize(("entry", "wildcard_ok", "fragment"), REJECT)
def test_classify_rejects(entry, wildcard_ok, fragment):
    with pytest.raises(TargetError) as err:
        classify(entry, wildcard_ok=wildcard_ok)
    assert fragment in str(err.value)


# -- rules 1-9: the validator --------------------------------------------------------------

def run(network, backend="cube"):
    problems = Problems()
    doc = validate(network, backend, problems)
    return doc, problems.items


DENY = {"deny_egress_by_default": True}


def e2b(rules, allow=("api.example.com", "*.svc.example.com")):
    return {**DENY, "allow_out": list(allow), "e2b_host_rules": rules}


def cube(*rules, **extra):
    return {**extra, "cube_rules": list(rules)}


def inject(header="Authorization", secret="s3cret", fmt="Bearer ${SECRET}"):
    return {"header": header, "secret": secret, "format": fmt}


VALID = [
    pytest.param(None, "docker", id="r1-no-network-block"),
    pytest.param({}, "docker", id="r1-empty-block-is-default"),
    pytest.param({"allow_out": ["10.0.0.0/8"], "deny_out": ["1.2.3.4"]}, "docker",
                 id="r2-decisions5-docker-accepts-ip-lists"),
    pytest.param({**DENY, "allow_out": ["pypi.org"]}, "docker",
                 id="r2-decisions5-docker-accepts-domains"),
    pytest.param({"allow_out": ["1.2.3.4", "10.0.0.0/8"], "deny_out": ["10.1.0.0/16"]}, "e2b",
                 id="r6-ips-only-need-no-fallback"),
    pytest.param({**DENY, "allow_out": ["example.com"]}, "e2b",
                 id="r6-domain-with-deny-egress-by-default"),
    pytest.param({"allow_out": ["example.com"], "deny_out": ["0.0.0.0/0"]}, "e2b",
                 id="r6-domain-with-0.0.0.0/0"),
    pytest.param({"allow_out": ["*.example.com"], "deny_out": ["1.2.3.4/0"]}, "e2b",
                 id="r5-any-ipv4-/0-counts-as-deny-all"),
    pytest.param(cube({"name": "r", "host": "api.example.com:443", "scheme": " HTTPS ",
                       "audit": "FULL", "methods": ["get", " post "],
                       "inject": [inject()]}), "cube", id="r7-full-allow-rule"),
    pytest.param(cube({"name": "r", "host": "10.0.0.1:8080"}), "cube", id="r7-host-ip-and-port"),
    pytest.param(cube({"name": "r", "sni": "*.example.com"}), "cube", id="r7-sni-wildcard"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "deny": True,
                       "inject": [inject(secret="")]}), "cube",
                 id="r7-deny-rule-with-empty-secret"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "inject": [
        inject("X-A"), inject("x-a")]}), "cube", id="r7-header-unique-by-exact-string"),
    pytest.param(cube({"name": "r", "host": "a.example.com"}), "e2b",
                 id="r7-ambiguity-cube-rules-not-refused-on-e2b"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {"X-Key": "v"}}]), "e2b",
                 id="r8-exact-host-covered"),
    pytest.param(e2b([{"host": "API.example.com.", "headers": {"X-Key": "v"}}]), "e2b",
                 id="r8-host-classified-before-coverage"),
    pytest.param(e2b([{"host": "x.svc.example.com"}]), "e2b", id="r8-wildcard-covers-subdomain"),
    pytest.param(e2b([{"host": f"h{i}.svc.example.com"} for i in range(10)]), "e2b",
                 id="r8-ten-rules-ok"),
    pytest.param(e2b([{"host": "api.example.com",
                       "headers": {f"X-{i}": "v" for i in range(20)}}]), "e2b",
                 id="r8-twenty-headers-ok"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {"X" * 64: "v" * 2048}}]), "e2b",
                 id="r8-name-64-value-2048-ok"),
    pytest.param({"allow_public_inbound": True}, "e2b", id="r9-allow-public-inbound-accepted"),
]


@pytest.mark.parametrize(("network", "backend"), VALID)
def test_valid_policies(network, backend):
    doc, problems = run(network, backend)
    assert problems == []
    if network is None:
        assert doc is None
    else:
        assert doc["allow_public_inbound"] is False


INVALID = [
    # (network, backend, field, distinctive part of the message)
    pytest.param(cube({"name": "r", "host": "a.example.com"}), "docker", "network.cube_rules",
                 "switch this config to cube or e2b", id="r2-docker-refuses-cube-rules"),
    pytest.param(e2b([{"host": "api.example.com"}]), "docker", "network.e2b_host_rules",
                 "does not support e2b_host_rules", id="r2-docker-refuses-e2b-host-rules"),
    pytest.param({"allow_out": ["1.2.3.4", "10.0.0.1", "bad entry"]}, "e2b",
                 "network.allow_out[2]", "spaces", id="r3-error-names-the-index"),
    pytest.param({"allow_out": ["1.2.3.4", "1.2.3.4/32"]}, "e2b", "network.allow_out[1]",
                 "'1.2.3.4' and '1.2.3.4/32'", id="r4-duplicate-names-both-spellings"),
    pytest.param({**DENY, "allow_out": ["Example.com", "example.com."]}, "e2b",
                 "network.allow_out[1]", "duplicate", id="r4-duplicate-domain-spellings"),
    pytest.param({"allow_out": ["10.1.2.3/8", "10.0.0.0/8"]}, "e2b", "network.allow_out[1]",
                 "(10.0.0.0/8)", id="r4-duplicate-cidr-after-normalising"),
    pytest.param({"deny_out": ["evil.example.com"]}, "e2b", "network.deny_out[0]",
                 "deny by default", id="r5-domain-in-deny-out-hints-default-deny"),
    pytest.param({"deny_out": ["*.example.com"]}, "e2b", "network.deny_out[0]",
                 "wildcards are not allowed", id="r5-wildcard-in-deny-out"),
    pytest.param({"deny_out": ["1.2.3.4/32", "1.2.3.4"]}, "e2b", "network.deny_out[1]",
                 "duplicate", id="r5-duplicate-deny"),
    pytest.param({"deny_out": ["2001:db8::1"]}, "e2b", "network.deny_out[0]", "IPv6",
                 id="r5-ipv6-deny"),
    pytest.param({"allow_out": ["example.com"]}, "e2b", "network.allow_out",
                 "deny-all fallback", id="r6-domain-without-fallback"),
    pytest.param({"allow_out": ["*.example.com"], "deny_out": ["10.0.0.0/8"]}, "e2b",
                 "network.allow_out", "deny-all fallback", id="r6-non-/0-deny-is-no-fallback"),
    pytest.param(cube({"host": "a.example.com"}), "cube", "network.cube_rules[0].name",
                 "is required", id="r7-name-required"),
    pytest.param(cube({"name": "   ", "host": "a.example.com"}), "cube",
                 "network.cube_rules[0].name", "is required", id="r7-name-blank"),
    pytest.param(cube({"name": "r", "host": "a.example.com"}, {"name": " r ", "sni": "b.ex.com"}),
                 "cube", "network.cube_rules[1].name", "duplicate rule name",
                 id="r7-name-unique-after-trim"),
    pytest.param(cube({"name": "r", "methods": ["GET"], "path": "/x"}), "cube",
                 "network.cube_rules[0]", "host or an sni", id="r7-host-or-sni-required"),
    pytest.param(cube({"name": "r", "host": "bad_host.example.com:443"}), "cube",
                 "network.cube_rules[0].host", "1-63", id="r7-host-classified"),
    pytest.param(cube({"name": "r", "sni": "10.0.0.1"}), "cube", "network.cube_rules[0].sni",
                 "must be a domain", id="r7-sni-must-be-domain"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "scheme": "ftp"}), "cube",
                 "network.cube_rules[0].scheme", "http or https", id="r7-scheme"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "audit": "verbose"}), "cube",
                 "network.cube_rules[0].audit", "metadata", id="r7-audit"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "methods": ["GET", "FETCH"]}),
                 "cube", "network.cube_rules[0].methods[1]", "must be one of", id="r7-methods"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "inject": [inject(" ")]}), "cube",
                 "network.cube_rules[0].inject[0].header", "HTTP header name",
                 id="r7-inject-header-required"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "inject": [inject("X-Auth:")]}),
                 "cube", "network.cube_rules[0].inject[0].header", "HTTP header name",
                 id="r7-inject-header-separator"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "inject": [inject("X Auth")]}),
                 "cube", "network.cube_rules[0].inject[0].header", "HTTP header name",
                 id="r7-inject-header-space"),
    pytest.param(cube({"name": "r", "host": "a.example.com",
                       "inject": [inject("X-A"), inject(" X-A ")]}), "cube",
                 "network.cube_rules[0].inject[1].header", "duplicate header",
                 id="r7-inject-header-unique-in-rule"),
    pytest.param(cube({"name": "r", "host": "a.example.com",
                       "inject": [inject(secret="a\r\nX-Evil: 1")]}), "cube",
                 "network.cube_rules[0].inject[0].secret", "CR, LF or NUL",
                 id="r7-inject-secret-crlf"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "inject": [inject(secret="a\0")]}),
                 "cube", "network.cube_rules[0].inject[0].secret", "CR, LF or NUL",
                 id="r7-inject-secret-nul"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "inject": [inject(fmt="B\n${S}")]}),
                 "cube", "network.cube_rules[0].inject[0].format", "CR, LF or NUL",
                 id="r7-inject-format-lf"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "deny": True,
                       "inject": [inject()]}), "cube",
                 "network.cube_rules[0].inject[0].secret", "deny rule", id="r7-deny-with-secret"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "deny": "yes"}), "cube",
                 "network.cube_rules[0].deny", "true or false", id="r7-deny-must-be-bool"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "scheme": 443}), "cube",
                 "network.cube_rules[0].scheme", "a string", id="r7-scheme-must-be-string"),
    pytest.param(cube({"name": "r", "host": "a.example.com", "port": 443}), "cube",
                 "network.cube_rules[0].port", "Unknown field", id="r7-unknown-rule-field"),
    pytest.param(e2b([{"host": f"h{i}.svc.example.com"} for i in range(11)]), "e2b",
                 "network.e2b_host_rules", "at most 10", id="r8-eleven-rules"),
    pytest.param(e2b([{"host": "a" * 60 + "." + "b" * 60 + ".svc.example.com"}]), "e2b",
                 "network.e2b_host_rules[0].host", "at most 128", id="r8-host-over-128"),
    pytest.param(e2b([{"host": "  "}]), "e2b", "network.e2b_host_rules[0].host", "is required",
                 id="r8-host-required"),
    pytest.param(e2b([{"host": "10.0.0.1"}], allow=["10.0.0.1"]), "e2b",
                 "network.e2b_host_rules[0].host", "must be a domain", id="r8-host-must-be-domain"),
    pytest.param(e2b([{"host": "other.example.org"}]), "e2b", "network.e2b_host_rules[0].host",
                 "not allowed by allow_out", id="r8-host-not-covered"),
    pytest.param(e2b([{"host": "svc.example.com"}]), "e2b", "network.e2b_host_rules[0].host",
                 "not allowed by allow_out", id="r8-wildcard-does-not-cover-apex"),
    pytest.param(e2b([{"host": "xsvc.example.com"}]), "e2b", "network.e2b_host_rules[0].host",
                 "not allowed by allow_out", id="r8-wildcard-needs-a-dot-boundary"),
    pytest.param(e2b([{"host": "api.example.com"}, {"host": "API.example.com."}]), "e2b",
                 "network.e2b_host_rules[1].host", "duplicate host", id="r8-duplicate-host"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {f"X-{i}": "v" for i in range(21)}}]),
                 "e2b", "network.e2b_host_rules[0].headers", "at most 20", id="r8-21-headers"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {"X" * 65: "v"}}]), "e2b",
                 f"network.e2b_host_rules[0].headers.{'X' * 65}", "at most 64",
                 id="r8-header-name-65"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {"X:Y": "v"}}]), "e2b",
                 "network.e2b_host_rules[0].headers.X:Y", "HTTP header name",
                 id="r8-header-name-not-token"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {" ": "v"}}]), "e2b",
                 "network.e2b_host_rules[0].headers. ", "must not be empty",
                 id="r8-header-name-blank"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {"X-K": "v\r\nX-Evil: 1"}}]), "e2b",
                 "network.e2b_host_rules[0].headers.X-K", "CR, LF or NUL",
                 id="r8-header-value-crlf"),
    pytest.param(e2b([{"host": "api.example.com", "headers": {"X-K": "v" * 2049}}]), "e2b",
                 "network.e2b_host_rules[0].headers.X-K", "at most 2048",
                 id="r8-header-value-2049"),
    pytest.param(e2b([{"host": "api.example.com", "headers": ["X-K"]}]), "e2b",
                 "network.e2b_host_rules[0].headers", "an object", id="r8-headers-must-be-object"),
    pytest.param({"allow_out": "1.2.3.4"}, "e2b", "network.allow_out", "must be a list",
                 id="shape-list-expected"),
    pytest.param({"allow_out": [1234]}, "e2b", "network.allow_out[0]", "must be a string",
                 id="shape-entry-must-be-string"),
    pytest.param({"deny_egress_by_default": "true"}, "e2b", "network.deny_egress_by_default",
                 "true or false", id="shape-bool-expected"),
    pytest.param({"allow_inbound": True}, "e2b", "network.allow_inbound", "Unknown field",
                 id="shape-unknown-field"),
    pytest.param([], "e2b", "network", "must be an object", id="shape-block-must-be-object"),
]


@pytest.mark.parametrize(("network", "backend", "field", "fragment"), INVALID)
def test_invalid_policies(network, backend, field, fragment):
    _, problems = run(network, backend)
    assert {p["field"] for p in problems} == {field}, problems
    assert any(fragment in p["message"] for p in problems), problems


def test_every_problem_is_reported_at_once():
    _, problems = run({
        "bogus": 1,
        "allow_out": ["ok.example.com", "bad entry", "::1"],
        "deny_out": ["evil.example.com"],
        "cube_rules": [{"host": "a.example.com", "scheme": "ftp"}],
    })
    assert [p["field"] for p in problems] == [
        "network.bogus", "network.allow_out[1]", "network.allow_out[2]", "network.deny_out[0]",
        "network.allow_out", "network.cube_rules[0].name", "network.cube_rules[0].scheme",
    ]


def test_stored_rules_are_complete_and_inbound_cleared():
    doc, problems = run({
        "allow_public_inbound": True,
        "cube_rules": [{"name": "r", "host": "a.example.com", "inject": [{"header": "X-K"}]}],
    })
    assert problems == []
    assert doc["allow_public_inbound"] is False
    assert doc["cube_rules"] == [{
        "name": "r", "scheme": "", "sni": "", "host": "a.example.com", "methods": [], "path": "",
        "deny": False, "audit": "", "inject": [{"header": "X-K", "secret": "", "format": ""}],
    }]
    doc, problems = run(e2b([{"host": "api.example.com", "headers": None}]), "e2b")
    assert problems == [] and doc["e2b_host_rules"] == [{"host": "api.example.com",
                                                         "headers": {}}]


# -- canonical deny-all (after rule 9) -----------------------------------------------------

@pytest.mark.parametrize(("deny_out", "canonical"), [
    pytest.param(["1.2.3.4/0"], [DENY_ALL], id="ipv4-/0-rewritten"),
    pytest.param([" 10.0.0.0/0 "], [DENY_ALL], id="spaced-/0-rewritten"),
    pytest.param(["0.0.0.0/0"], [DENY_ALL], id="canonical-kept"),
    pytest.param(["1.2.3.4", "10.1.2.3/8", "1.2.3.4/0"], ["1.2.3.4", "10.1.2.3/8", DENY_ALL],
                 id="others-pass-through-unchanged"),
    pytest.param(["::/0", "junk"], ["::/0", "junk"], id="invalid-entries-untouched"),
    pytest.param([], [], id="empty"),
])
def test_canonical_deny_out(deny_out, canonical):
    assert canonical_deny_out(deny_out) == canonical


@pytest.mark.parametrize(("network", "denies"), [
    pytest.param(None, False, id="no-policy"),
    pytest.param({}, False, id="default-policy"),
    pytest.param({"deny_egress_by_default": True}, True, id="switch"),
    pytest.param({"deny_out": ["0.0.0.0/0"]}, True, id="canonical-/0"),
    pytest.param({"deny_out": ["1.2.3.4/0"]}, True, id="any-ipv4-/0"),
    pytest.param({"deny_out": ["10.0.0.0/8"]}, False, id="partial-deny"),
    pytest.param({"deny_out": "0.0.0.0/0"}, False, id="unvalidated-string-is-not-a-list"),
])
def test_denies_by_default_treats_both_forms_alike(network, denies):
    assert denies_by_default(network) is denies


# -- properties ------------------------------------------------------------------------------

LABEL_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"
labels = st.builds(
    lambda first, middle, last: first + middle + last if middle or last else first,
    st.sampled_from(LABEL_CHARS),
    st.text(LABEL_CHARS + "-", max_size=20),
    st.sampled_from(LABEL_CHARS),
)
domains = st.lists(labels, min_size=2, max_size=5).map(".".join).filter(
    lambda d: not set(d) <= set("0123456789."))
ipv4 = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
networks = st.tuples(ipv4, st.integers(0, 32)).map(lambda t: f"{t[0]}/{t[1]}")
entries = st.one_of(ipv4, networks, domains, domains.map(lambda d: "*." + d),
                    domains.map(str.upper), domains.map(lambda d: d + "."))


@given(entries)
def test_classify_is_idempotent_on_keys(entry):
    target = classify(entry, wildcard_ok=True)
    again = classify(target.key, wildcard_ok=True)
    assert again == target


@given(ipv4)
def test_any_ipv4_address_is_a_slash_32(address):
    assert classify(address, wildcard_ok=False).key == f"{address}/32"


@given(networks)
def test_any_ipv4_network_normalises_to_its_network_address(cidr):
    expected = ipaddress.ip_network(cidr, strict=False)
    target = classify(cidr, wildcard_ok=False)
    assert target.key == str(expected)
    assert target.is_deny_all == (expected.prefixlen == 0)


@given(domains, st.booleans(), st.booleans())
def test_valid_domains_round_trip_lowercase(domain, trailing_dot, upper):
    spelled = (domain.upper() if upper else domain) + ("." if trailing_dot else "")
    target = classify(spelled, wildcard_ok=False)
    assert (target.key, target.kind, target.wildcard) == (domain, "domain", False)


@given(domains, st.randoms(use_true_random=False))
def test_uppercase_variants_give_the_same_key(domain, rnd):
    mixed = "".join(ch.upper() if rnd.random() < 0.5 else ch for ch in domain)
    assert classify(mixed, wildcard_ok=True).key == classify(domain, wildcard_ok=True).key


@given(domains)
def test_wildcard_keys_start_with_star_dot_exactly_once(domain):
    key = classify("*." + domain.upper(), wildcard_ok=True).key
    assert key.startswith("*.") and key.count("*") == 1 and key[2:] == domain


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                      st.text(max_size=12),
                      st.sampled_from(["1.2.3.4", "0.0.0.0/0", "*.example.com", "example.com",
                                       "::1", "Authorization", "GET", "https", "full", "***"]))
json_any = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["name", "host", "sni", "headers", "inject", "header",
                                     "secret", "format", "methods", "deny", "scheme", "audit",
                                     "path", "X-K", "x"]), inner, max_size=5),
), max_leaves=25)
network_keys = st.sampled_from(["deny_egress_by_default", "allow_public_inbound", "allow_out",
                                "deny_out", "cube_rules", "e2b_host_rules", "bogus"])
garbage_networks = st.one_of(json_any, st.dictionaries(network_keys, json_any, max_size=6))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(garbage_networks, st.sampled_from(["docker", "e2b", "cube"]))
def test_validate_never_crashes_on_garbage(network, backend):
    problems = Problems()
    doc = validate(network, backend, problems)  # must not raise
    for problem in problems.items:
        assert set(problem) == {"field", "message"}
        assert problem["field"].startswith("network") and problem["message"]
    if doc is not None and not problems:
        assert doc["allow_public_inbound"] is False
        denies_by_default(doc)
        canonical_deny_out(doc["deny_out"])


@given(st.lists(st.one_of(ipv4, networks), max_size=6, unique=True),
       st.lists(st.one_of(ipv4, networks), max_size=6))
def test_ip_only_policies_never_need_the_fallback(allow, deny):
    problems = Problems()
    validate({"allow_out": allow, "deny_out": deny}, "e2b", problems)
    assert not any("fallback" in p["message"] for p in problems.items)
