"""E2B sandboxes through the official `e2b` SDK, one client per config (decisions 1, 4).

Create sends, through `Sandbox.create`: the template, the config's env vars, the
sandlot_* metadata, the config's TTL as `timeout`, lifecycle pause-on-timeout with
auto-resume (TTL expiry pauses, traffic resumes), and the resolved network policy
(reference 4.3): `allow_internet_access`, `network.allow_out`, `network.deny_out`
with every IPv4 /0 written as 0.0.0.0/0, `network.allow_public_traffic = False`, and
each `e2b_host_rules` entry as `network.rules[host] = [{transform: {headers}}]`.
Resume is the SDK's connect (POST /v2/sandboxes/{id}/connect). Everything else is
shared with Cube in common.py.
"""

from __future__ import annotations

from typing import Any

from app.backends.base import BackendError, SandboxSpec
from app.backends.e2b.common import E2BCompatible, canonical_deny_out


class E2BBackend(E2BCompatible):
    provider = "e2b"
    ttl_key = "e2b_sandbox_ttl_seconds"
    default_ttl = 300

    def network_options(self, spec: SandboxSpec) -> dict[str, Any]:
        """The SDK's `network` option for this spec's resolved policy."""
        policy = spec.network
        if policy.cube_rules:
            raise BackendError("this config's cube_rules are Cube L7 rules, which E2B cannot "
                               "enforce; clear them or use the cube backend")
        network: dict[str, Any] = {"allow_public_traffic": policy.allow_public_traffic}
        if policy.allow_out:
            network["allow_out"] = list(policy.allow_out)
        deny_out = canonical_deny_out(policy.deny_out)
        if deny_out:
            network["deny_out"] = deny_out
        if policy.host_rules:
            network["rules"] = {rule.host: [{"transform": {"headers": dict(rule.headers)}}]
                                for rule in policy.host_rules}
        return network

    def _create(self, spec: SandboxSpec, template: str) -> str:
        network = self.network_options(spec)
        with self._errors("create sandbox", self._secrets(spec)):
            sandbox = self.sdk.Sandbox.create(
                template=template, timeout=self.settings.ttl_seconds,
                metadata=dict(spec.metadata), envs=dict(spec.env),
                allow_internet_access=spec.network.allow_internet_access, network=network,
                lifecycle={"on_timeout": "pause", "auto_resume": True})
        return sandbox.sandbox_id

    def _resume(self, sandbox_id: str) -> None:
        with self._errors("resume sandbox"):
            self.sdk.Sandbox.connect(sandbox_id, timeout=self.settings.ttl_seconds)
