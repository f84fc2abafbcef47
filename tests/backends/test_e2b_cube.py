"""E2B and Cube specifics: exactly what each backend sends, and how failures map.

The real `e2b` SDK talks to tests/fakes/e2b_server.py on loopback; the fake records
every request, so these tests assert the wire: the network policy (reference 4.3),
metadata, env vars, TTL and lifecycle at create, the data-plane headers, and the typed
errors with no secret in any exception text.
"""

from __future__ import annotations

import dataclasses
import socket
import time
import traceback
import uuid
from collections.abc import Iterator

import pytest

from app.backends import registry
from app.backends.base import (
    BackendAuthError,
    BackendError,
    BackendUnavailable,
    CubeRule,
    HostRule,
    QuotaExceeded,
    ResolvedNetworkPolicy,
    SandboxNotFound,
    SandboxSpec,
    SandboxState,
)
from app.backends.e2b import common
from app.backends.e2b.cube import CubeBackend, _traffic_tokens
from app.security import ssrf
from app.services.sandboxes import document as sandbox_doc
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, RUN_LABEL, require_docker
from tests.fakes.e2b_server import FakeE2BServer

ENV_SECRET = "env-secret-9d41c2"
HEADER_SECRET = "Bearer hdr-secret-51aa07"
INJECT_SECRET = "inject-secret-c0ffee42"


def _server(flavor: str) -> Iterator[FakeE2BServer]:
    require_docker()
    server = FakeE2BServer(flavor, image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}{flavor}x").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def e2b_server() -> Iterator[FakeE2BServer]:
    yield from _server("e2b")


@pytest.fixture(scope="module")
def cube_server() -> Iterator[FakeE2BServer]:
    yield from _server("cube")


@pytest.fixture(params=["e2b", "cube"])
def server(request) -> FakeE2BServer:
    return request.getfixturevalue(f"{request.param}_server")


def backend_for(server: FakeE2BServer, **overrides):
    return registry.make_backend(server.flavor, server.settings(**overrides))


def spec(network: ResolvedNetworkPolicy | None = None, **fields) -> SandboxSpec:
    metadata = {"sandlot_tenant_id": "7", "sandlot_session_id": uuid.uuid4().hex,
                "sandlot_binding_version": "3", "sandlot_provider": "e2b",
                "sandlot_sandbox_config_id": "cfg-1", "sandlot_purpose": "session",
                RUN_LABEL: RUN_ID}
    return SandboxSpec(template="", metadata=metadata, env={"API_TOKEN": ENV_SECRET},
                       network=network or ResolvedNetworkPolicy(), **fields)


def created(server: FakeE2BServer, backend, the_spec: SandboxSpec):
    before = len(server.creates)
    info = backend.create(the_spec)
    assert len(server.creates) == before + 1
    return info, server.creates[-1]


def policy_of(doc: dict) -> ResolvedNetworkPolicy:
    """Validate a config document as the API does, then resolve its policy (reference 4.3)."""
    return sandbox_doc.resolve_policy(sandbox_doc.validate(doc, resolve_urls=False))


def texts(exc: BaseException) -> str:
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


# -- what create sends -------------------------------------------------------------------

def test_e2b_create_sends_the_resolved_policy_metadata_envs_ttl_and_lifecycle(e2b_server):
    policy = policy_of({
        "sandbox_type": "e2b", "e2b": {"api_key": "k", "template_id": "t"},
        "network": {"deny_egress_by_default": True,
                    "allow_out": ["pypi.org", "*.github.com", "1.1.1.1"],
                    "deny_out": ["8.8.8.8", "9.9.9.9/0"],
                    "e2b_host_rules": [{"host": "api.github.com",
                                        "headers": {"Authorization": HEADER_SECRET}}]}})
    the_spec = spec(policy)
    backend = backend_for(e2b_server, e2b_sandbox_ttl_seconds=420)

    info, call = created(e2b_server, backend, the_spec)

    body = call.body
    assert call.path == "/v2/sandboxes"
    assert body["templateID"] == e2b_server.template_id
    assert body["metadata"] == the_spec.metadata
    assert body["envVars"] == {"API_TOKEN": ENV_SECRET}
    assert body["timeout"] == 420
    assert body["autoPause"] is True and body["autoResume"] == {"enabled": True}
    assert body["allow_internet_access"] is False
    assert body["network"] == {
        "allowPublicTraffic": False,
        "allowOut": ["pypi.org", "*.github.com", "1.1.1.1"],
        "denyOut": ["8.8.8.8", "0.0.0.0/0"],
        "rules": {"api.github.com": [{"transform": {"headers": {
            "Authorization": HEADER_SECRET}}}]},
    }
    assert call.headers["X-Api-Key"] == e2b_server.api_key
    assert info.state is SandboxState.running and info.metadata == the_spec.metadata
    backend.delete(info.id)


def test_e2b_deny_out_is_canonicalised_and_an_open_policy_stays_open(e2b_server):
    backend = backend_for(e2b_server)
    restricted = ResolvedNetworkPolicy(allow_internet_access=True,
                                       deny_out=("10.0.0.0/8", "1.2.3.4/0", "0.0.0.0/0"))

    info, call = created(e2b_server, backend, spec(restricted))
    open_info, open_call = created(e2b_server, backend, spec())

    assert call.body["network"]["denyOut"] == ["10.0.0.0/8", "0.0.0.0/0"]
    assert call.body["allow_internet_access"] is True
    assert open_call.body["allow_internet_access"] is True
    assert open_call.body["network"] == {"allowPublicTraffic": False}
    assert open_call.body["timeout"] == 600  # the fake's settings; default below
    backend.delete(info.id)
    backend.delete(open_info.id)


def test_default_ttls_are_five_minutes_for_e2b_and_thirty_for_cube():
    settings = {"api_key": "k", "template_id": "t", "http_timeout_sec": 0}

    assert registry.make_backend("e2b", settings).settings.ttl_seconds == 300
    assert registry.make_backend("cube", settings).settings.ttl_seconds == 1800
    assert registry.make_backend("cube", settings).settings.http_timeout_sec == 30


def test_e2b_refuses_cube_rules_it_cannot_enforce_and_sends_nothing(e2b_server):
    policy = ResolvedNetworkPolicy(cube_rules=(CubeRule(name="x", allow=False, host="a.b"),))
    before = len(e2b_server.creates)

    with pytest.raises(BackendError, match="cube_rules"):
        backend_for(e2b_server).create(spec(policy))
    assert len(e2b_server.creates) == before


def test_cube_create_sends_l7_rules_with_secrets_lifecycle_and_dns(cube_server):
    policy = policy_of({
        "sandbox_type": "cube",
        "cube": {"api_url": "http://c", "proxy_url": "http://p", "sandbox_domain": "d",
                 "template_id": "t"},
        "network": {
            "deny_egress_by_default": True, "allow_out": ["api.openai.com"],
            "deny_out": ["169.254.0.0/16"],
            "cube_rules": [
                {"name": "openai", "scheme": "HTTPS", "sni": "api.openai.com",
                 "host": "api.openai.com", "methods": ["post", "GET"], "path": "/v1/",
                 "audit": "Full", "inject": [{"header": "Authorization",
                                              "secret": INJECT_SECRET,
                                              "format": "Bearer ${SECRET}"}]},
                {"name": "no-uploads", "host": "uploads.example.com", "deny": True}],
            "e2b_host_rules": [{"host": "api.openai.com",
                                "headers": {"X-Org": HEADER_SECRET}}]}})
    backend = backend_for(cube_server, dns_servers=["10.0.0.2", "1.1.1.1"])
    the_spec = spec(policy)

    info, call = created(cube_server, backend, the_spec)

    body = call.body
    assert call.path == "/sandboxes"  # Cube has no /v2 create
    assert body["templateID"] == cube_server.template_id
    assert body["metadata"] == the_spec.metadata and body["envVars"] == the_spec.env
    assert body["timeout"] == 600
    assert body["lifecycle"] == {"onTimeout": "pause", "autoResume": True}
    assert body["autoPause"] is True and body["autoResume"] == {"enabled": True}
    assert body["allow_internet_access"] is False
    assert body["network"] == {
        "allowPublicTraffic": False,
        "allowOut": ["api.openai.com"],
        "denyOut": ["169.254.0.0/16", "0.0.0.0/0"],
        "dnsServers": ["10.0.0.2", "1.1.1.1"],
        "rules": [
            {"name": "openai",
             "match": {"sni": "api.openai.com", "host": "api.openai.com",
                       "method": ["POST", "GET"], "path": "/v1/", "scheme": "https"},
             "action": {"allow": True, "audit": "full",
                        "inject": [{"header": "Authorization", "secret": INJECT_SECRET,
                                    "format": "Bearer ${SECRET}"}]}},
            {"name": "no-uploads", "match": {"host": "uploads.example.com"},
             "action": {"allow": False}},
            {"name": "e2b-transform-api.openai.com", "match": {"host": "api.openai.com"},
             "action": {"allow": True, "inject": [{"header": "X-Org",
                                                   "secret": HEADER_SECRET}]}},
        ],
    }
    assert info.traffic_token  # given once, for the caller to persist
    assert info.traffic_token not in repr(info)
    backend.delete(info.id)


def test_cube_default_ttl_is_sent_when_the_config_has_none(cube_server):
    settings = cube_server.settings()
    settings.pop("cube_sandbox_ttl_seconds")
    backend = CubeBackend(settings)

    info, call = created(cube_server, backend, spec())

    assert call.body["timeout"] == 1800
    backend.delete(info.id)


# -- the data plane ----------------------------------------------------------------------

def test_exec_goes_through_the_gateway_with_the_sandbox_in_host_and_its_tokens(server):
    backend = backend_for(server)
    info = backend.create(spec())
    sandbox = server.sandboxes[info.id]
    server.calls.clear()

    result = backend.exec(info.id, 'echo "$API_TOKEN $K"; pwd', user="root", cwd="/tmp",
                          env={"K": "per-exec"})

    assert (result.stdout, result.exit_code) == (f"{ENV_SECRET} per-exec\n/tmp\n", 0)
    assert sandbox.processes[-1] == {"user": "root", "cwd": "/tmp", "envs": {"K": "per-exec"},
                                     "argv": ["/bin/bash", "-l", "-c",
                                              'echo "$API_TOKEN $K"; pwd']}
    starts = [c for c in server.envd_calls() if c.path == "/process.Process/Start"]
    assert starts, "the command went through envd's Start"
    headers = starts[-1].headers
    assert headers["Host"] == f"49983-{info.id}.{server.domain}"
    assert headers["X-Access-Token"] == sandbox.envd_token
    if server.flavor == "cube":
        assert headers["E2b-Traffic-Access-Token"] == sandbox.traffic_token
    backend.delete(info.id)


def test_cube_data_plane_needs_the_traffic_token_replayed_after_a_restart(cube_server):
    backend = backend_for(cube_server)
    info = backend.create(spec())
    _traffic_tokens.clear()  # a new process: nothing remembered

    fresh = backend_for(cube_server)
    with pytest.raises(BackendAuthError):
        fresh.exec(info.id, "true")

    fresh.remember_traffic_token(info.id, info.traffic_token)
    assert fresh.exec(info.id, "echo ok").stdout == "ok\n"
    fresh.delete(info.id)


def test_ttl_expiry_pauses_as_the_lifecycle_asked_and_connect_resumes(server):
    backend = backend_for(server)
    info = backend.create(spec())
    backend.write_file(info.id, "kept.txt", b"kept")

    server.expire(info.id)

    assert backend.get(info.id).state is SandboxState.paused
    assert backend.connect(info.id).state is SandboxState.running
    assert backend.read_file(info.id, "kept.txt") == b"kept"
    connects = server.api_calls("POST", "/v2/sandboxes/" if server.flavor == "e2b"
                                else f"/sandboxes/{info.id}/connect")
    assert connects and connects[-1].body == {"timeout": 600}
    backend.delete(info.id)


def test_list_asks_the_api_for_metadata_and_states(server):
    backend = backend_for(server)
    server.calls.clear()

    backend.list({"sandlot_session_id": "nope"}, frozenset({SandboxState.paused}))

    call = server.api_calls("GET", "/v2/sandboxes")[-1]
    assert call.query["metadata"] == "sandlot_session_id=nope"
    assert call.query["state"] == "paused"
    assert backend.list({}, frozenset({SandboxState.terminal})) == []


def test_list_follows_pages(server, monkeypatch):
    backend = backend_for(server)
    session = uuid.uuid4().hex
    infos = [backend.create(spec()) for _ in range(3)]
    for info in infos:
        server.sandboxes[info.id].metadata["sandlot_session_id"] = session
    monkeypatch.setattr(common, "LIST_PAGE", 2)

    found = backend.list({"sandlot_session_id": session})

    assert sorted(i.id for i in found) == sorted(i.id for i in infos)
    assert any("nextToken" in c.query for c in server.api_calls("GET", "/v2/sandboxes"))
    for info in infos:
        backend.delete(info.id)


def test_a_sandbox_without_our_metadata_is_invisible(server):
    backend = backend_for(server)
    info = backend.create(spec())
    server.sandboxes[info.id].metadata = {"someone": "else"}

    with pytest.raises(SandboxNotFound):
        backend.get(info.id)
    with pytest.raises(SandboxNotFound):
        backend.exec(info.id, "true")
    backend.delete(info.id)  # not ours: success, and left alone
    assert info.id in server.sandboxes
    server._kill(server.sandboxes[info.id])


# -- errors --------------------------------------------------------------------------------

def test_a_wrong_api_key_is_an_auth_error_that_never_shows_the_key(server):
    wrong = "sk-wrong-key-3141592653"
    backend = backend_for(server, api_key=wrong)

    for call in (backend.health, lambda: backend.create(spec()),
                 lambda: backend.list({"a": "b"}), lambda: backend.get("i123")):
        with pytest.raises(BackendAuthError) as caught:
            call()
        assert wrong not in texts(caught.value)
        assert server.api_key not in texts(caught.value)


def test_not_found_answers_are_sandbox_not_found(server):
    backend = backend_for(server)

    with pytest.raises(SandboxNotFound):
        backend.get("i" + "0" * 19)
    with pytest.raises(SandboxNotFound):
        backend.connect("i" + "0" * 19)
    backend.delete("i" + "0" * 19)  # idempotent

    info = backend.create(spec())
    server.fail_next(404, "sandbox not found", method="POST", path=f"/sandboxes/{info.id}")
    with pytest.raises(SandboxNotFound):
        backend.pause(info.id)
    backend.delete(info.id)


@pytest.mark.parametrize(("status", "error"), [(429, QuotaExceeded), (503, BackendUnavailable),
                                               (500, BackendError)])
def test_provider_failures_map_to_typed_errors_without_secrets(server, status, error):
    backend = backend_for(server)
    # A provider that echoes the request back must not leak it through us.
    echo = f"rejected body API_TOKEN={ENV_SECRET} key={server.api_key} {INJECT_SECRET}"
    # The SDK retries 429 and 503 three times itself: outlast that.
    server.fail_next(status, echo, method="POST", times=1 if status == 500 else 4)
    policy = ResolvedNetworkPolicy(cube_rules=(CubeRule(
        name="r", allow=True, host="a.example.com",
        inject=({"header": "Authorization", "secret": INJECT_SECRET},)),)) if (
        server.flavor == "cube") else ResolvedNetworkPolicy(
        allow_out=("a.example.com",), deny_out=("0.0.0.0/0",),
        host_rules=(HostRule("a.example.com", {"X": INJECT_SECRET}),))

    try:
        with pytest.raises(error) as caught:
            backend.create(spec(policy))
    finally:
        server.clear_failures()

    text = texts(caught.value)
    for secret in (ENV_SECRET, server.api_key, INJECT_SECRET):
        assert secret not in text


def test_a_server_that_is_down_is_unavailable_quickly():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens
    for kind in ("e2b", "cube"):
        backend = registry.make_backend(kind, {
            "api_key": "down-key-2718281", "template_id": "t",
            "api_url": f"http://127.0.0.1:{port}", "proxy_url": f"http://127.0.0.1:{port}",
            "sandbox_domain": "x.test", "allow_private_endpoints": True})
        started = time.monotonic()
        with pytest.raises(BackendUnavailable) as caught:
            backend.health()
        assert time.monotonic() - started < 10
        assert f"127.0.0.1:{port}" in caught.value.reason
        assert "down-key-2718281" not in texts(caught.value)


def test_private_endpoints_are_refused_unless_the_config_allows_them(server):
    backend = backend_for(server, allow_private_endpoints=False)
    before = len(server.calls)

    with pytest.raises(BackendError, match="unsafe outbound URL"):
        backend.health()
    assert len(server.calls) == before  # nothing was sent


def test_exec_on_a_paused_sandbox_is_refused_not_silently_resumed(server):
    backend = backend_for(server)
    info = backend.create(spec())
    backend.pause(info.id)

    with pytest.raises(BackendError, match="paused"):
        backend.exec(info.id, "true")
    assert server.sandboxes[info.id].state == "paused"
    backend.delete(info.id)


def test_without_a_gateway_the_sdk_dialled_sandbox_host_is_ssrf_checked(e2b_server,
                                                                         monkeypatch):
    """No proxy_url: the SDK dials https://49983-<id>.<domain> from the provider's
    answer, so that host is checked like api_url (here it "resolves" privately)."""
    backend = backend_for(e2b_server)
    info = backend.create(spec())
    guarded = backend_for(e2b_server, proxy_url="")
    guarded.sdk  # noqa: B018 - the control plane passed its check (loopback allowed)
    guarded.settings = dataclasses.replace(guarded.settings, allow_private_endpoints=False)
    monkeypatch.setattr(ssrf, "resolve", lambda host, port, timeout=3.0: ["10.0.0.5"])
    before = len(e2b_server.envd_calls())

    with pytest.raises(BackendError, match=rf"https://49983-{info.id}\.e2b\.test.*unsafe"):
        guarded.exec(info.id, "true")
    assert len(e2b_server.envd_calls()) == before
    backend.delete(info.id)
