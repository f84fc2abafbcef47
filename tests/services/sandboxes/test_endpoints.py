"""Issue 9 item 3: Docker engines are the operator's setting, a config names one, and
configs stored with an engine URL before that keep working by a read-time mapping."""

from __future__ import annotations

import uuid

import pytest

from app import create_app
from app.backends.base import BackendError
from app.extensions import db
from app.models import SandboxConfig
from app.services.sandboxes import document, endpoints
from app.services.sandboxes.endpoints import EngineSettingError, parse_engines
from app.services.sandboxes.provider import backend_for
from tests import factories

ENGINES = {"local": {"url": "unix:///var/run/docker.sock"},
           "gpu": {"url": "tcp://10.0.0.5:2376", "tls_dir": "/etc/sandlot/gpu"}}


@pytest.fixture
def operator(app, monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", ENGINES)


def legacy_row(tenant, **block) -> SandboxConfig:
    """A config as stored before engines were a setting (host and tls_cert_path)."""
    row = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant.id, name=uuid.uuid4().hex[:8],
                        description="", sandbox_type="docker",
                        config={"sandbox_type": "docker", "env_vars": {}, "network": None,
                                "docker": {"image": "sandlot/sandbox:base", **block}})
    db.session.add(row)
    db.session.commit()
    return row


@pytest.mark.parametrize(("block", "engine"), [
    ({"host": ""}, "local"),
    ({"host": "unix:///var/run/docker.sock"}, "local"),
    ({}, "local"),
    ({"host": "tcp://10.0.0.5:2376", "tls_cert_path": "/etc/sandlot/gpu"}, "gpu"),
    ({"host": "tcp://10.0.0.5:2376", "tls_cert_path": "/tmp/elsewhere"}, endpoints.UNLISTED),
    ({"host": "unix:///home/tenant/docker.sock"}, endpoints.UNLISTED),
], ids=["blank", "default-socket", "no-host", "listed-url", "listed-url-other-tls",
        "unlisted-socket"])
def test_stored_configs_map_to_an_engine_when_read(operator, block, engine):
    a = factories.populate("A")
    row = legacy_row(a.tenant, **block)

    assert endpoints.engine_of(row.config["docker"]) == engine
    shown = document.masked(row.config)["docker"]
    assert shown["engine"] == engine
    assert "host" not in shown and "tls_cert_path" not in shown


def test_a_mapped_config_gets_the_operators_url_and_tls_dir(operator):
    a = factories.populate("A")
    backend = backend_for(legacy_row(a.tenant, host="tcp://10.0.0.5:2376",
                                     tls_cert_path="/etc/sandlot/gpu").config)
    assert (backend.settings.host, backend.settings.tls_cert_path) == (
        "tcp://10.0.0.5:2376", "/etc/sandlot/gpu")
    assert backend.capabilities.egress_rules is False  # a remote engine: not enforceable here


def test_an_unlisted_engine_is_unusable_until_the_operator_lists_it(app, operator, monkeypatch):
    a = factories.populate("A")
    row = legacy_row(a.tenant, host="unix:///home/tenant/docker.sock")
    with pytest.raises(BackendError, match="not offered by this deployment"):
        backend_for(row.config)
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES",
                        {**ENGINES, "tenant": {"url": "unix:///home/tenant/docker.sock"}})
    assert backend_for(row.config).settings.host == "unix:///home/tenant/docker.sock"


def test_a_mapped_config_saves_back_by_name_with_the_same_identity(operator):
    a = factories.populate("A")
    row = legacy_row(a.tenant, host="unix:///var/run/docker.sock")
    saved = document.validate(document.merge(document.masked(row.config), row.config))
    assert saved["docker"]["engine"] == "local" and "host" not in saved["docker"]
    assert document.identity(saved) == document.identity(row.config)


@pytest.mark.parametrize(("raw", "message"), [
    ("{", "not valid JSON"),
    ("{}", "non-empty"),
    ({"Local!": {"url": "unix:///run/docker.sock"}}, "engine name"),
    ({"a": {"url": "unix://run/docker.sock"}}, "absolute"),
    ({"a": {"url": "unix:///run/../etc/docker.sock"}}, "normalised"),
    ({"a": {"url": "tcp://10.0.0.5:2376"}}, "needs tls_dir"),
    ({"a": {"url": "tcp://10.0.0.5"}}, "host and a port"),
    ({"a": {"url": "ssh://root@10.0.0.5"}}, "unix:///path or tcp://"),
    ({"a": {"url": "unix:///run/docker.sock", "extra": 1}}, "url and optionally tls_dir"),
])
def test_the_engine_setting_is_checked(raw, message):
    with pytest.raises(EngineSettingError, match=message):
        parse_engines(raw)


def test_an_app_with_a_bad_engine_setting_refuses_to_start():
    with pytest.raises(RuntimeError, match="absolute"):
        create_app({"ENV": "testing", "SANDBOX_DOCKER_ENGINES": '{"a": "unix://x.sock"}'})


def test_the_default_is_the_local_engine():
    assert parse_engines("") == {"local": endpoints.Engine("local",
                                                           "unix:///var/run/docker.sock")}


def test_a_stored_private_endpoint_stops_working_when_the_operator_disallows_it(app,
                                                                               monkeypatch):
    """Saved while allowed, then the operator turns private endpoints off: the config's
    own flag no longer counts where the backend is built (sessions, checks, inventory)."""
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    doc = document.validate({"sandbox_type": "e2b", "allow_private_endpoints": True,
                                "e2b": {"api_key": "k-123", "template_id": "base",
                                        "api_url": "http://127.0.0.1:9"}})
    assert backend_for(doc).settings.allow_private_endpoints is True

    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", False)
    backend = backend_for(doc)
    assert backend.settings.allow_private_endpoints is False
    with pytest.raises(BackendError, match="unsafe outbound URL"):
        backend.settings.check_endpoints()


@pytest.mark.parametrize("url", ["http://169.254.169.254:49983", "http://[fd00:ec2::254]:80",
                                 "http://0.0.0.0:49983"])
def test_the_data_plane_never_reaches_metadata_even_with_private_endpoints(url):
    from app.backends.e2b.e2b import E2BBackend

    backend = E2BBackend({"api_key": "k-123", "template_id": "base",
                          "api_url": "http://127.0.0.1:9", "allow_private_endpoints": True})
    backend._check_data_plane("http://127.0.0.1:49983")  # private is allowed here
    with pytest.raises(BackendError, match="never reachable"):
        backend._check_data_plane(url)


def _docker(engine: str, network: dict | None = None, **block) -> dict:
    return {"sandbox_type": "docker", "docker": {"image": "sandlot/sandbox:base",
                                                  "engine": engine, **block},
            "network": network}


@pytest.mark.parametrize("network", [
    None,  # the reference's default: open
    {"deny_out": ["203.0.113.0/24"]},
    {"deny_egress_by_default": True, "allow_out": ["pypi.org"]},
], ids=["open", "deny-list", "allow-list"])
def test_a_remote_engine_takes_no_networked_config_at_save(app, operator, network):
    """Issue 28: a restrictive policy on a tcp engine was refused only at the first exec,
    and an open one got Docker's default bridge, where sandboxes reached each other and
    the always-on denies (the host, metadata, private ranges) did not apply. Nothing on
    this host can enforce a policy there, so only sandboxes without network may run."""
    from app.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as refused:
        document.validate(_docker("gpu", network))
    (problem,) = [e for e in refused.value.errors if e["field"] == "docker.engine"]
    assert "another host" in problem["message"] and "10.0.0.5" not in problem["message"]


@pytest.mark.parametrize("doc", [
    _docker("gpu", {"deny_egress_by_default": True}),
    _docker("gpu", None, network_mode="none"),
    _docker("local", None),
], ids=["deny-all", "network-none", "local-open"])
def test_a_remote_engine_takes_a_config_without_network_and_local_takes_any(
        app, operator, doc):
    assert document.validate(doc)["docker"]["engine"] == doc["docker"]["engine"]


def test_a_stored_networked_config_on_a_remote_engine_never_gets_the_default_bridge():
    """A config saved before that rule: the create is refused, not run on the bridge."""
    from app.backends.base import ResolvedNetworkPolicy, SandboxSpec
    from app.backends.docker.backend import DockerBackend

    backend = DockerBackend({"host": "tcp://localhost:1", "tls_cert_path": ""})
    spec = SandboxSpec(template="sandlot/sandbox:base", metadata={},
                       network=ResolvedNetworkPolicy())
    with pytest.raises(BackendError, match="another host"):
        backend._network_for(spec)
