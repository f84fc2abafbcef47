"""The sandbox config document (reference 1.2, 1.3, 4.3): validation with exact field
paths, secret masking and update merges (with properties), identity, and resolution of
the network policy. No request ever leaves the process: URLs are IP literals and any
name lookup fails the test."""

from __future__ import annotations

import copy
import socket

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from app.backends.base import HostRule
from app.errors import ValidationFailed
from app.services.sandboxes import document as sandbox_doc
from app.services.sandboxes.document import masked, merge, resolve_policy, validate
from app.services.sandboxes.network_policy import DENY_ALL

PUBLIC_API, PUBLIC_PROXY = "https://8.8.8.8/", "https://8.8.4.4:8443/"


@pytest.fixture(autouse=True)
def no_name_lookups(monkeypatch):
    def refuse(host, *args, **kwargs):
        raise AssertionError(f"test tried to resolve {host!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def docker(**block):
    return {"sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:1", **block}}


def e2b(**block):
    return {"sandbox_type": "e2b", "e2b": {"api_key": "e2b_live", "template_id": "base", **block}}


def cube(**block):
    return {"sandbox_type": "cube", "cube": {
        "api_url": PUBLIC_API, "proxy_url": PUBLIC_PROXY, "sandbox_domain": "cube.example.com",
        "template_id": "t1", "api_key": "cube_live", **block}}


def without(doc, block, field):
    doc = copy.deepcopy(doc)
    del doc[block][field]
    return doc


def errors_of(raw):
    with pytest.raises(ValidationFailed) as err:
        validate(raw)
    assert err.value.data == {"errors": err.value.errors}
    return err.value.errors


# -- validation table ------------------------------------------------------------------

VALID = [
    pytest.param(docker(), id="docker-minimal"),
    pytest.param(e2b(), id="e2b-minimal"),
    pytest.param(cube(), id="cube-minimal"),
    pytest.param({**e2b(), "terminal_idle_disconnect_sec": 0}, id="idle-0-means-default"),
    pytest.param({**e2b(), "terminal_idle_disconnect_sec": 60}, id="idle-60-lower-bound"),
    pytest.param({**e2b(), "terminal_idle_disconnect_sec": 86400}, id="idle-24h-upper-bound"),
    pytest.param({**e2b(), "skill_rollout": ""}, id="rollout-empty"),
    pytest.param({**e2b(), "skill_rollout": "next_turn"}, id="rollout-next-turn"),
    pytest.param({**e2b(), "skill_rollout": "new_session"}, id="rollout-new-session"),
    pytest.param(docker(network_mode="bridge"), id="docker-network-bridge"),
    pytest.param(docker(network_mode="none"), id="docker-network-none"),
    pytest.param(docker(engine="local"), id="docker-local-engine-by-name"),
    pytest.param(cube(dns_servers=["1.1.1.1", "2606:4700:4700::1111"]), id="cube-dns-ips"),
    pytest.param(e2b(api_url=PUBLIC_API), id="public-api-url"),
    pytest.param({**docker(), "network": {"allow_out": ["10.0.0.0/8"], "deny_out": ["1.2.3.4"]}},
                 id="decisions5-docker-network-lists"),
    pytest.param({**e2b(), "skill_image": {"snapshot_id": "evil"}, "volume_mount": {"x": 1}},
                 id="server-owned-echo-accepted"),
]


PRIVATE_OPT_IN = [
    pytest.param({**e2b(api_url="http://127.0.0.1:9/"), "allow_private_endpoints": True},
                 id="private-api-url-with-opt-in"),
    pytest.param({**cube(api_url="http://10.0.0.1/", proxy_url="http://10.0.0.2/"),
                  "allow_private_endpoints": True}, id="private-cube-urls-with-opt-in"),
]


@pytest.mark.parametrize("raw", PRIVATE_OPT_IN)
def test_private_endpoints_need_the_operator_and_the_config(raw, app, monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    assert validate(raw)["allow_private_endpoints"] is True
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", False)
    assert errors_of(raw)[0]["message"].endswith("unless the operator allows them.")


@pytest.mark.parametrize("url", ["http://169.254.169.254/", "http://[fd00:ec2::254]/",
                                 "http://0.0.0.0:8080/", "http://224.0.0.1/"])
def test_metadata_and_link_local_endpoints_are_refused_even_when_allowed(url, app,
                                                                         monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    problems = errors_of({**e2b(api_url=url), "allow_private_endpoints": True})
    assert problems[0]["field"] == "e2b.api_url"
    assert "never reachable" in problems[0]["message"]


@pytest.mark.parametrize("raw", VALID)
def test_valid_documents(raw):
    doc = validate(raw)
    assert doc["sandbox_type"] == raw["sandbox_type"]
    assert "skill_image" not in doc and "volume_mount" not in doc


INVALID = [
    # (raw, field, distinctive part of the message)
    pytest.param({}, "sandbox_type", "required", id="type-required"),
    pytest.param({"sandbox_type": "local"}, "sandbox_type", "docker", id="type-unsupported"),
    pytest.param(without(docker(), "docker", "image"), "docker.image",
                 "Image is required.", id="docker-requires-image"),
    pytest.param({"sandbox_type": "docker"}, "docker.image", "Image is required.",
                 id="docker-block-missing"),
    pytest.param(without(e2b(), "e2b", "api_key"), "e2b.api_key", "API key is required.",
                 id="e2b-requires-api-key"),
    pytest.param(e2b(api_key="***"), "e2b.api_key", "API key is required.",
                 id="e2b-mask-is-not-a-key"),
    pytest.param(without(e2b(), "e2b", "template_id"), "e2b.template_id",
                 "Template ID is required.", id="e2b-requires-template"),
    pytest.param(without(cube(), "cube", "api_url"), "cube.api_url",
                 "API URL is required.", id="cube-requires-api-url"),
    pytest.param(without(cube(), "cube", "proxy_url"), "cube.proxy_url",
                 "Proxy URL is required.", id="cube-requires-proxy-url"),
    pytest.param(without(cube(), "cube", "sandbox_domain"), "cube.sandbox_domain",
                 "Sandbox domain is required.", id="cube-requires-sandbox-domain"),
    pytest.param(without(cube(), "cube", "template_id"), "cube.template_id",
                 "Template ID is required.", id="cube-requires-template"),
    pytest.param({**e2b(), "terminal_idle_disconnect_sec": 59}, "terminal_idle_disconnect_sec",
                 "between 60 and 86400", id="idle-59"),
    pytest.param({**e2b(), "terminal_idle_disconnect_sec": 86401},
                 "terminal_idle_disconnect_sec", "between 60 and 86400", id="idle-86401"),
    pytest.param({**e2b(), "terminal_idle_disconnect_sec": -1}, "terminal_idle_disconnect_sec",
                 "greater than or equal to 0", id="idle-negative"),
    pytest.param({**e2b(), "skill_rollout": "always"}, "skill_rollout",
                 "Skill rollout must be Next turn or New session",
                 id="rollout-unknown"),
    pytest.param(docker(network_mode="host"), "docker.network_mode", "'bridge' or 'none'",
                 id="docker-network-mode-host"),
    pytest.param(docker(host="unix:///var/run/docker.sock"), "docker.host",
                 "set by the operator", id="docker-host-is-the-operators"),
    pytest.param(docker(host="tcp://10.0.0.5:2376"), "docker.host", "set by the operator",
                 id="docker-tcp-host-is-the-operators"),
    pytest.param(docker(tls_cert_path="/etc/passwd"), "docker.tls_cert_path",
                 "set by the operator", id="docker-tls-path-is-the-operators"),
    pytest.param(docker(engine="gpu"), "docker.engine", "use one of: local",
                 id="docker-engine-not-offered"),
    pytest.param({**e2b(api_url="http://127.0.0.1:9/"), "allow_private_endpoints": True},
                 "e2b.api_url", "unless the operator allows them",
                 id="private-opt-in-without-the-operator"),
    pytest.param(cube(dns_servers=["8.8.8.8", "dns.google"]), "cube.dns_servers[1]",
                 "not an IP address", id="cube-dns-non-ip"),
    pytest.param(cube(dns_servers="8.8.8.8"), "cube.dns_servers", "valid list",
                 id="cube-dns-not-a-list"),
    pytest.param(e2b(api_url="http://127.0.0.1:9/"), "e2b.api_url", "unsafe outbound URL",
                 id="ssrf-loopback-api-url"),
    pytest.param(e2b(api_url="http://10.0.0.1/"), "e2b.api_url", "unsafe outbound URL",
                 id="ssrf-private-api-url"),
    pytest.param(cube(proxy_url="http://169.254.169.254/"), "cube.proxy_url",
                 "unsafe outbound URL", id="ssrf-metadata-proxy-url"),
    pytest.param(cube(api_url="http://100.100.100.200/"), "cube.api_url", "unsafe outbound URL",
                 id="ssrf-shared-address-space"),
    pytest.param(e2b(proxy_url="http://[::ffff:127.0.0.1]/"), "e2b.proxy_url",
                 "unsafe outbound URL", id="ssrf-ipv4-mapped-ipv6"),
    pytest.param(e2b(api_url="ftp://8.8.8.8/"), "e2b.api_url", "unsafe outbound URL",
                 id="ssrf-scheme"),
    pytest.param({**e2b(api_url="https://user:pw@8.8.8.8/"), "allow_private_endpoints": True},
                 "e2b.api_url", "credentials", id="ssrf-credentials-even-with-opt-in"),
    pytest.param({**e2b(), "colour": "blue"}, "colour", "Unknown field", id="unknown-top-field"),
    pytest.param(e2b(apikey="x"), "e2b.apikey", "Unknown field", id="unknown-block-field"),
    pytest.param({**e2b(), "terminal_idle_disconnect_sec": "60"},
                 "terminal_idle_disconnect_sec", "valid integer", id="type-int-as-string"),
    pytest.param({**e2b(), "default_timeout_sec": 1.5}, "default_timeout_sec", "valid integer",
                 id="type-float-for-int"),
    pytest.param({**e2b(), "desktop_enabled": "yes"}, "desktop_enabled", "valid boolean",
                 id="type-bool"),
    pytest.param({**e2b(), "env_vars": {"TOKEN": 5}}, "env_vars.TOKEN", "valid string",
                 id="type-env-value"),
    pytest.param({**e2b(), "env_vars": ["TOKEN"]}, "env_vars", "valid dictionary",
                 id="type-env-map"),
    pytest.param({**e2b(), "network": "open"}, "network", "valid dictionary",
                 id="type-network"),
    pytest.param({"sandbox_type": "e2b", "e2b": "key"}, "e2b",
                 "E2B settings: input should be a valid dictionary.",
                 id="type-backend-block"),
    pytest.param({**e2b(), "env_vars": {"1BAD": "x"}}, "env_vars.1BAD", "environment variable",
                 id="env-name"),
    pytest.param({**e2b(), "network": {"allow_out": ["1.2.3.4", "10.0.0.1", "bad entry"]}},
                 "network.allow_out[2]", "spaces", id="network-path-is-document-relative"),
    pytest.param({**docker(), "network": {"deny_egress_by_default": True,
                                          "allow_out": ["a.example.com"],
                                          "e2b_host_rules": [{"host": "a.example.com"}]}},
                 "network.e2b_host_rules", "docker backend does not support",
                 id="decisions5-docker-refuses-host-rules"),
    pytest.param({**docker(), "desktop_enabled": True}, "desktop_enabled",
                 "Docker has no desktop template", id="docker-has-no-desktop"),
]


@pytest.mark.parametrize(("raw", "field", "fragment"), INVALID)
def test_invalid_documents(raw, field, fragment):
    errors = errors_of(raw)
    assert [e["field"] for e in errors] == [field], errors
    assert fragment in errors[0]["message"], errors


def test_not_an_object():
    assert errors_of(["sandbox_type", "e2b"]) == [{"field": "config",
                                                   "message": "The config must be an object."}]


def test_every_problem_is_reported_at_once():
    raw = {
        "sandbox_type": "e2b", "terminal_idle_disconnect_sec": 59, "skill_rollout": "soon",
        "e2b": {"template_id": "base", "api_url": "http://127.0.0.1:9/"},
        "network": {"allow_out": ["1.2.3.4", "ok.example.com", "::1"]},
    }
    assert [e["field"] for e in errors_of(raw)] == [
        "terminal_idle_disconnect_sec", "skill_rollout", "e2b.api_key", "e2b.api_url",
        "network.allow_out[2]", "network.allow_out",
    ]


def test_shape_errors_and_network_errors_are_reported_together():
    raw = {**e2b(api_key=5), "desktop_enabled": "no",
           "network": {"allow_out": ["bad entry"], "deny_out": ["evil.example.com"]}}
    assert sorted(e["field"] for e in errors_of(raw)) == [
        "desktop_enabled", "e2b.api_key", "network.allow_out[0]", "network.deny_out[0]"]


def test_normalised_output():
    doc = validate({
        **cube(dns_servers=[" 1.1.1.1 ", "1.1.1.1", "9.9.9.9", "9.9.9.9 "]),
        "env_vars": {"PEM": "-----BEGIN KEY-----\nabc\n-----END KEY-----\n", "PAD": " p "},
        "network": {"allow_public_inbound": True},
        "e2b": {"api_key": "ignored"},
        "skill_image": {"snapshot_id": "forged"},
    })
    assert doc["cube"]["dns_servers"] == ["1.1.1.1", "9.9.9.9"]
    assert doc["env_vars"]["PEM"].endswith("-----\n") and doc["env_vars"]["PAD"] == " p "
    assert doc["network"]["allow_public_inbound"] is False
    assert "e2b" not in doc and "skill_image" not in doc


# -- masking and merging (reference 1.3) -------------------------------------------------

def full_doc():
    return validate({
        **cube(api_key="cube-secret"),
        "env_vars": {"A": "env-a", "B": "env-b", "EMPTY": ""},
        "skill_rollout": "next_turn",
        "network": {"cube_rules": [
            {"name": "Api", "host": "api.example.com",
             "inject": [{"header": "Authorization", "secret": "inject-secret",
                         "format": "Bearer ${SECRET}"}, {"header": "X-Unset"}]},
        ]},
    })


def test_masked_hides_every_set_secret_and_keeps_unset_empty():
    out = masked(full_doc())
    assert out["cube"]["api_key"] == "***"
    assert out["env_vars"] == {"A": "***", "B": "***", "EMPTY": ""}
    inject = out["network"]["cube_rules"][0]["inject"]
    assert [i["secret"] for i in inject] == ["***", ""]
    assert inject[0]["format"] == "Bearer ${SECRET}" and inject[0]["header"] == "Authorization"


def test_masked_e2b_header_values():
    doc = validate({**e2b(), "network": {
        "deny_egress_by_default": True, "allow_out": ["api.example.com"],
        "e2b_host_rules": [{"host": "api.example.com", "headers": {"X-Key": "hv", "X-E": ""}}]}})
    out = masked(doc)
    assert out["e2b"]["api_key"] == "***"
    assert out["network"]["e2b_host_rules"][0]["headers"] == {"X-Key": "***", "X-E": ""}
    assert doc["network"]["e2b_host_rules"][0]["headers"]["X-Key"] == "hv"  # a copy


def test_merge_keeps_replaces_and_deletes():
    stored = full_doc()
    update = masked(stored)
    update["cube"]["api_key"] = ""                     # "" keeps
    update["env_vars"] = {"A": "***", "NEW": "fresh"}  # B deleted, A kept, NEW added
    update["skill_rollout"] = ""                       # empty keeps the stored rollout
    rule = update["network"]["cube_rules"][0]
    rule["name"], rule["inject"][0]["header"] = "  API ", " authorization "
    update["skill_image"], update["volume_mount"] = {"snapshot_id": "forged"}, {"x": 1}
    out = merge(update, stored)
    assert out["cube"]["api_key"] == "cube-secret"
    assert out["env_vars"] == {"A": "env-a", "NEW": "fresh"}
    assert out["skill_rollout"] == "next_turn"
    assert out["network"]["cube_rules"][0]["inject"][0]["secret"] == "inject-secret"
    assert "skill_image" not in out and "volume_mount" not in out
    assert validate(out)["env_vars"] == {"A": "env-a", "NEW": "fresh"}


def test_merge_e2b_headers_by_host_and_name_ignoring_case_and_spaces():
    stored = validate({**e2b(), "network": {
        "deny_egress_by_default": True, "allow_out": ["api.example.com", "*.svc.example.com"],
        "e2b_host_rules": [{"host": "api.example.com", "headers": {"X-Key": "k1"}},
                           {"host": "a.svc.example.com", "headers": {"X-Key": "k2"}}]}})
    update = masked(stored)
    update["network"]["e2b_host_rules"] = [
        {"host": " A.SVC.example.com ", "headers": {" x-key ": "***"}},
        {"host": "api.example.com", "headers": {"X-Key": "rotated", "X-Other": "***"}},
    ]
    rules = merge(update, stored)["network"]["e2b_host_rules"]
    assert rules[0]["headers"] == {" x-key ": "k2"}
    assert rules[1]["headers"] == {"X-Key": "rotated", "X-Other": ""}


def test_merge_does_not_let_one_rule_take_anothers_secret():
    stored = full_doc()
    update = masked(stored)
    update["network"]["cube_rules"][0]["name"] = "Other"
    out = merge(update, stored)
    assert out["network"]["cube_rules"][0]["inject"][0]["secret"] == ""


@pytest.mark.parametrize("network", [
    {"cube_rules": 5}, {"cube_rules": [{"name": "r", "inject": 5}]},
    {"cube_rules": ["r", None, {"inject": ["x", {"header": 3}]}]},
    {"e2b_host_rules": 7}, {"e2b_host_rules": [{"host": None, "headers": [1]}, "x"]},
], ids=["rules-int", "inject-int", "mixed-junk", "host-rules-int", "host-rules-junk"])
def test_merge_tolerates_unvalidated_garbage(network):
    out = merge({**e2b(), "network": network}, full_doc())
    with pytest.raises(ValidationFailed):
        validate(out)


@pytest.mark.parametrize("update", [
    {"sandbox_type": ["e2b"], "e2b": {"api_key": "***"}}, {"sandbox_type": "e2b", "e2b": 5},
    {"sandbox_type": None, "env_vars": {"A": "***"}},
    {"sandbox_type": "docker", "docker": {"engine": ["x"]}, "env_vars": []},
], ids=["type-a-list", "block-an-int", "type-none", "engine-a-list"])
def test_merge_refuses_garbage_with_a_field_error_not_a_crash(update):
    try:
        validate(merge(update, full_doc()))
    except ValidationFailed as err:
        assert err.errors
    else:
        pytest.fail("accepted")


# -- identity ----------------------------------------------------------------------------

def test_identity_changes_only_with_backend_identity_fields():
    base = validate(e2b(api_url=PUBLIC_API))
    same = validate({**e2b(api_url=PUBLIC_API, template_id="other", e2b_sandbox_ttl_seconds=60),
                     "env_vars": {"A": "b"}, "default_timeout_sec": 5,
                     "network": {"deny_egress_by_default": True}})
    assert sandbox_doc.identity(base) == sandbox_doc.identity(same)
    for changed in (e2b(api_url=PUBLIC_API, api_key="other"), e2b(api_url=PUBLIC_PROXY),
                    {**e2b(api_url=PUBLIC_API), "allow_private_endpoints": True},
                    e2b(api_url=PUBLIC_API, sandbox_domain="x.example.com")):
        assert sandbox_doc.identity(validate(changed)) != sandbox_doc.identity(base)



# -- resolution (reference 4.3) ----------------------------------------------------------

def test_no_policy_allows_internet_and_never_public_inbound():
    policy = resolve_policy(validate(e2b()))
    assert policy.allow_internet_access is True and policy.allow_public_traffic is False
    assert policy.deny_out == () and policy.allow_out == () and not policy.restricted


@pytest.mark.parametrize(("deny_out", "expected"), [
    pytest.param([], (DENY_ALL,), id="appended"),
    pytest.param(["1.2.3.4", DENY_ALL], ("1.2.3.4", DENY_ALL), id="already-present"),
    pytest.param(["10.9.8.7/0"], (DENY_ALL,), id="other-/0-canonicalised-not-doubled"),
])
def test_deny_by_default_appends_deny_all_once(deny_out, expected):
    doc = validate({**e2b(), "network": {"deny_egress_by_default": True, "deny_out": deny_out,
                                         "allow_public_inbound": True}})
    policy = resolve_policy(doc)
    assert policy.allow_internet_access is False and policy.allow_public_traffic is False
    assert policy.deny_out == expected


def test_slash_zero_in_deny_out_is_the_same_as_the_switch():
    policy = resolve_policy(validate({**e2b(), "network": {"deny_out": ["1.2.3.4/0"]}}))
    assert policy.allow_internet_access is False and policy.deny_out == (DENY_ALL,)


def test_cube_rules_resolve_with_deny_as_allow_false():
    doc = validate({**cube(), "network": {"cube_rules": [
        {"name": " block ", "host": "evil.example.com", "deny": True},
        {"name": "api", "sni": "api.example.com", "scheme": "HTTPS", "audit": "Full",
         "methods": [" get "], "inject": [{"header": "Authorization", "secret": "s",
                                          "format": "Bearer ${SECRET}"}]},
    ]}})
    block, api = resolve_policy(doc).cube_rules
    assert (block.name, block.allow, block.host) == ("block", False, "evil.example.com")
    assert (api.allow, api.scheme, api.audit, api.methods) == (True, "https", "full", ("GET",))
    assert api.inject == ({"header": "Authorization", "secret": "s",
                           "format": "Bearer ${SECRET}"},)


def test_e2b_host_rules_resolve_to_host_rules():
    doc = validate({**e2b(), "network": {
        "deny_egress_by_default": True, "allow_out": ["api.example.com", "pypi.org"],
        "e2b_host_rules": [{"host": " api.example.com ", "headers": {"X-Key": "v"}},
                           {"host": "pypi.org"}]}})
    policy = resolve_policy(doc)
    assert policy.host_rules == (HostRule("api.example.com", {"X-Key": "v"}),
                                 HostRule("pypi.org", {}))
    assert policy.allow_out == ("api.example.com", "pypi.org")


@pytest.mark.parametrize(("raw", "internet"), [
    pytest.param(docker(network_mode="none"), False, id="network-mode-none"),
    pytest.param(docker(network_mode="bridge"), True, id="bridge"),
    pytest.param({**docker(), "network": {"deny_egress_by_default": True}}, False,
                 id="deny-by-default"),
    pytest.param({**docker(), "network": {"deny_out": ["0.0.0.0/0"]}}, False, id="slash-zero"),
])
def test_docker_internet_access(raw, internet):
    assert resolve_policy(validate(raw)).allow_internet_access is internet


# -- properties over valid documents -----------------------------------------------------

secrets_ = st.builds(lambda n, tail, pad: pad + f"sek{n}-{tail}" + pad,
                     st.integers(0, 10**6), st.text("abcXYZ019 *=+/", max_size=8),
                     st.sampled_from(["", " "]))
maybe_secret = st.one_of(st.just(""), secrets_)
env_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True).filter(
    lambda n: not n.startswith("SANDLOT_"))


def fold(value):
    return value.strip().lower()


@st.composite
def cube_rules(draw, unique=str.strip):
    names = draw(st.lists(st.sampled_from(["api", "Api", " web ", "pkg"]), max_size=3,
                          unique_by=unique))
    rules = []
    for name in names:
        headers = draw(st.lists(st.sampled_from(["Authorization", "X-Key", "x-key", " X-Tok "]),
                                max_size=3, unique_by=unique))
        rules.append({"name": name, "host": "api.example.com",
                      "inject": [{"header": h, "secret": draw(maybe_secret),
                                  "format": "Bearer ${SECRET}"} for h in headers]})
    return rules


@st.composite
def e2b_rules(draw, unique=lambda name: name):
    hosts = draw(st.lists(st.sampled_from(["api.example.com", "a.svc.example.com",
                                           "b.svc.example.com"]), max_size=3, unique=True))
    names = st.sampled_from(["X-Key", "x-key", " X-Key", "Authorization"])
    return [{"host": host, "headers": dict(draw(st.lists(
        st.tuples(names, maybe_secret), max_size=3, unique_by=lambda t: unique(t[0]))))}
        for host in hosts]


@st.composite
def valid_docs(draw, kinds=("docker", "e2b", "cube"), always_network=False, unique=None):
    """Valid stored documents; `unique` (e.g. fold) makes rule names and header names
    distinct under that spelling, not just as exact strings."""
    kind = draw(st.sampled_from(kinds))
    raw = {"docker": docker, "e2b": e2b, "cube": cube}[kind]()
    if kind != "docker":
        raw[kind]["api_key"] = draw(secrets_).strip()
    raw["env_vars"] = draw(st.dictionaries(env_names, maybe_secret, max_size=4))
    raw["skill_rollout"] = draw(st.sampled_from(["", "next_turn", "new_session"]))
    network = {"deny_egress_by_default": True,
               "allow_out": ["api.example.com", "*.svc.example.com"]}
    if kind == "cube":
        network["cube_rules"] = draw(cube_rules(unique or str.strip))
    if kind == "e2b":
        network["e2b_host_rules"] = draw(e2b_rules(unique or (lambda name: name)))
    if always_network or draw(st.booleans()):
        raw["network"] = network
    return validate(raw)


def planted(doc):
    """Every secret value set in a stored document, with a path to find it again."""
    found = []
    for kind in ("cube", "e2b"):
        if doc.get(kind, {}).get("api_key"):
            found.append(((kind, "api_key"), doc[kind]["api_key"]))
    found += [(("env_vars", k), v) for k, v in doc["env_vars"].items() if v]
    network = doc.get("network") or {}
    for r, rule in enumerate(network.get("cube_rules") or []):
        found += [(("network", "cube_rules", r, "inject", i, "secret"), item["secret"])
                  for i, item in enumerate(rule["inject"]) if item["secret"]]
    for r, rule in enumerate(network.get("e2b_host_rules") or []):
        found += [(("network", "e2b_host_rules", r, "headers", name), value)
                  for name, value in rule["headers"].items() if value]
    return found


def strings(value):
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


def at(doc, path):
    for part in path:
        doc = doc[part]
    return doc


def put(doc, path, value):
    at(doc, path[:-1])[path[-1]] = value


PROPS = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow,
                                                          HealthCheck.function_scoped_fixture])


@PROPS
@given(valid_docs())
def test_masked_never_contains_a_planted_secret(doc):
    out = masked(doc)
    texts = list(strings(out))
    for _, secret in planted(doc):
        assert not any(secret.strip() in text for text in texts)
    assert validate(copy.deepcopy(doc)) == doc  # the stored shape is a fixed point


@PROPS
@given(valid_docs())
def test_merge_of_masked_is_the_stored_document(doc):
    assert merge(masked(doc), doc) == doc


@PROPS
@given(valid_docs(), st.data())
def test_merge_takes_a_new_secret_and_keeps_the_others(doc, data):
    secrets = planted(doc)
    assume(secrets)
    path, _ = data.draw(st.sampled_from(secrets))
    update = masked(doc)
    put(update, path, "brand-new-value")
    out = merge(update, doc)
    assert at(out, path) == "brand-new-value"
    for other, value in secrets:
        if other != path:
            assert at(out, other) == value


@PROPS
@given(valid_docs(), st.data())
def test_env_keys_absent_from_the_update_are_deleted(doc, data):
    assume(doc["env_vars"])
    gone = data.draw(st.sampled_from(sorted(doc["env_vars"])))
    update = masked(doc)
    del update["env_vars"][gone]
    out = merge(update, doc)
    assert gone not in out["env_vars"]
    assert out["env_vars"] == {k: v for k, v in doc["env_vars"].items() if k != gone}


@PROPS
@given(valid_docs(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
def test_server_owned_fields_never_come_from_input(doc, forged):
    update = {**masked(doc), "skill_image": forged, "volume_mount": forged}
    out = merge(update, {**doc, "skill_image": {"snapshot_id": "stored"}})
    assert "skill_image" not in out and "volume_mount" not in out
    stored_again = validate(out)
    assert "skill_image" not in stored_again and "volume_mount" not in stored_again


def respell(value):
    return f"  {value.strip().swapcase()} "


@PROPS
@given(valid_docs(kinds=("cube", "e2b"), always_network=True, unique=fold))
def test_network_secrets_match_ignoring_case_and_spaces(doc):
    network = doc["network"]
    update = masked(doc)
    for rule in update["network"]["cube_rules"]:
        rule["name"] = respell(rule["name"])
        for item in rule["inject"]:
            item["header"] = respell(item["header"])
    for rule in update["network"]["e2b_host_rules"]:
        rule["host"] = respell(rule["host"])
        rule["headers"] = {respell(name): value for name, value in rule["headers"].items()}
    out = merge(update, doc)["network"]
    assert [[i["secret"] for i in r["inject"]] for r in out["cube_rules"]] == [
        [i["secret"] for i in r["inject"]] for r in network["cube_rules"]]
    assert [list(r["headers"].values()) for r in out["e2b_host_rules"]] == [
        list(r["headers"].values()) for r in network["e2b_host_rules"]]
