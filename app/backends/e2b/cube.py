"""Cube sandboxes: Cube speaks the E2B API, so the same `e2b` SDK drives it (decisions 4).

Differences from E2B, all on the wire Cube defines (CubeAPI `POST /sandboxes`, the
request WeKnora's Cube client sends; see docs in the report of this change):

- create is `POST /sandboxes` (Cube has no /v2 create), sent with the SDK's own REST
  client and `NewSandbox` model, plus the fields that model cannot carry:
  `lifecycle: {onTimeout: "pause", autoResume: true}` and a `network` object whose
  `rules` is Cube's L7 list:
  `{name, match: {sni?, host?, method?: [..], path?, scheme?},
    action: {allow, audit?, inject?: [{header, secret, format?}]}}`
  (`cube_rules` with their inject secrets; a deny rule is `allow: false`). Rules are
  evaluated first-match-wins in this order. `e2b_host_rules` follow as allow rules
  with header injection, the mapping Cube's own SDK applies to E2B transforms.
  `allowPublicTraffic` is false, `allowOut`/`denyOut` as for E2B (0.0.0.0/0
  canonical), `dnsServers` from the config.
- resume is `POST /sandboxes/{id}/connect`.
- the data plane goes through `proxy_url` (CubeProxy) with the sandbox in the Host
  header, and carries the sandbox's traffic access token
  (`E2B-Traffic-Access-Token`): Cube issues it only at create, so it is remembered
  here and returned on the created SandboxInfo for the caller to persist and replay
  (`remember_traffic_token`) after a restart.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from e2b.api.client.api.sandboxes import post_sandboxes, post_sandboxes_sandbox_id_connect
from e2b.api.client.models import ConnectSandbox, NewSandbox, SandboxAutoResumeConfig

from app.backends.base import BackendError, CubeRule, HostRule, SandboxInfo, SandboxSpec
from app.backends.e2b.common import E2BCompatible, Remote, canonical_deny_out

TRAFFIC_HEADER = "E2B-Traffic-Access-Token"

# Traffic tokens by (control plane, sandbox id), shared by every client of the process:
# backends are built per request, the token is only given once.
_traffic_tokens: dict[tuple[str, str], str] = {}
_tokens_lock = threading.Lock()


def cube_rule(rule: CubeRule) -> dict[str, Any]:
    """One `cube_rules` entry on Cube's wire."""
    match: dict[str, Any] = {}
    for key, value in (("sni", rule.sni), ("host", rule.host), ("method", list(rule.methods)),
                       ("path", rule.path), ("scheme", rule.scheme)):
        if value:
            match[key] = value
    action: dict[str, Any] = {"allow": rule.allow}
    if rule.audit:
        action["audit"] = rule.audit
    inject = []
    for item in rule.inject:
        entry = {"header": str(item.get("header", "")).strip(),
                 "secret": str(item.get("secret", ""))}
        if item.get("format"):
            entry["format"] = str(item["format"])
        if entry["header"]:
            inject.append(entry)
    if inject and rule.allow:
        action["inject"] = inject
    return {"name": rule.name, "match": match, "action": action}


def host_rule(rule: HostRule) -> dict[str, Any]:
    """An `e2b_host_rules` entry as Cube expresses it (its SDK's E2B compatibility)."""
    return {"name": f"e2b-transform-{rule.host}", "match": {"host": rule.host},
            "action": {"allow": True, "inject": [{"header": name, "secret": value}
                                                 for name, value in rule.headers.items()]}}


class CubeBackend(E2BCompatible):
    provider = "cube"
    ttl_key = "cube_sandbox_ttl_seconds"
    default_ttl = 1800

    def _api_key(self) -> str:
        # The SDK refuses an empty key; a Cube cluster without auth ignores the header.
        return self.settings.api_key or "sandlot-no-api-key"

    def network_body(self, spec: SandboxSpec) -> dict[str, Any]:
        """The create request's `network` object (Cube's wire names)."""
        policy = spec.network
        network: dict[str, Any] = {"allowPublicTraffic": policy.allow_public_traffic}
        if policy.allow_out:
            network["allowOut"] = list(policy.allow_out)
        deny_out = canonical_deny_out(policy.deny_out)
        if deny_out:
            network["denyOut"] = deny_out
        if self.settings.dns_servers:
            network["dnsServers"] = list(self.settings.dns_servers)
        rules = [cube_rule(r) for r in policy.cube_rules] + [host_rule(r)
                                                             for r in policy.host_rules]
        if rules:
            network["rules"] = rules
        return network

    def create_body(self, spec: SandboxSpec, template: str) -> NewSandbox:
        body = NewSandbox(
            template_id=template, timeout=self.settings.ttl_seconds, auto_pause=True,
            auto_resume=SandboxAutoResumeConfig(enabled=True),
            allow_internet_access=spec.network.allow_internet_access,
            metadata=dict(spec.metadata), env_vars=dict(spec.env))
        body.additional_properties["lifecycle"] = {"onTimeout": "pause", "autoResume": True}
        body.additional_properties["network"] = self.network_body(spec)
        return body

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        info = super().create(spec)
        return dataclasses.replace(info, traffic_token=self._traffic_token(info.id))

    def _create(self, spec: SandboxSpec, template: str) -> str:
        body, secrets = self.create_body(spec, template), self._secrets(spec)
        with self._errors("create sandbox", secrets):
            response = post_sandboxes.sync_detailed(body=body, client=self.api)
        self._raise_for(response, "create sandbox", secrets)
        sandbox = response.parsed
        sandbox_id = getattr(sandbox, "sandbox_id", None)
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise BackendError("create sandbox: Cube returned no sandbox id")
        token = getattr(sandbox, "traffic_access_token", None)
        if isinstance(token, str) and token:
            self.remember_traffic_token(sandbox_id, token)
        return sandbox_id

    def _resume(self, sandbox_id: str) -> None:
        with self._errors("resume sandbox"):
            response = post_sandboxes_sandbox_id_connect.sync_detailed(
                sandbox_id, client=self.api,
                body=ConnectSandbox(timeout=self.settings.ttl_seconds))
        self._raise_for(response, "resume sandbox")

    # -- traffic token --------------------------------------------------------------------

    def _key(self, sandbox_id: str) -> tuple[str, str]:
        return (self.settings.control_url, sandbox_id)

    def remember_traffic_token(self, sandbox_id: str, token: str) -> None:
        """Replay a token persisted by the caller (Cube never repeats it)."""
        with _tokens_lock:
            _traffic_tokens[self._key(sandbox_id)] = token

    def _traffic_token(self, sandbox_id: str) -> str | None:
        with _tokens_lock:
            return _traffic_tokens.get(self._key(sandbox_id))

    def _forget(self, sandbox_id: str) -> None:
        with _tokens_lock:
            _traffic_tokens.pop(self._key(sandbox_id), None)

    def _data_plane_headers(self, remote: Remote) -> dict[str, str]:
        headers = super()._data_plane_headers(remote)
        token = self._traffic_token(remote.id)
        if token:
            headers[TRAFFIC_HEADER] = token
        return headers
