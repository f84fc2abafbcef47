"""The sandbox protocol on an E2B-compatible API, shared by the E2B and Cube backends.

Control plane through the `e2b` SDK bound to one config (`E2B(...)`): list through
its SandboxQuery paginator, kill/pause/timeout/snapshots through its Sandbox class
methods, and the few calls whose shape differs between E2B and Cube through the
SDK's own REST client. Data plane through the SDK's envd clients: commands via
`commands.run`, files via `files.*`, the web terminal's shell via `pty.*`, on a Sandbox
handle built from the sandbox's detail (its envd token and domain) without resuming
it: commands in commands.py, files in files.py, the terminal in terminal.py.

Only sandboxes carrying `sandlot_*` metadata are ours: anything else in the account
is invisible (get/exec/delete answer SandboxNotFound, list skips it).

Rights: envd does file operations as root, so a user check runs first (files.py).
Relative paths are relative to /workspace (reference 9.3), and commands run there
unless a cwd is given.

What differs per provider (create and resume) lives in e2b.py and cube.py.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from e2b import (
    E2B,
    ConnectionConfig,
    Sandbox,
    SandboxQuery,
)
from e2b import SandboxState as SdkState
from e2b.api import handle_api_exception
from e2b.api.client_sync import get_api_client
from packaging.version import Version

from app.backends.base import (
    LIVE_STATES,
    BackendError,
    Capabilities,
    ResolvedNetworkPolicy,
    SandboxInfo,
    SandboxNotFound,
    SandboxSpec,
    SandboxState,
    Unsupported,
)
from app.backends.e2b import io
from app.backends.e2b.commands import E2BCommands
from app.backends.e2b.files import E2BFiles
from app.backends.e2b.io import ENVD_PORT, E2BSettings
from app.backends.e2b.templates import TemplateCatalog
from app.backends.e2b.templates import iso as _iso
from app.backends.e2b.terminal import E2BTerminal
from app.backends.sandbox_paths import is_ours as _ours

DENY_ALL = "0.0.0.0/0"
SNAPSHOT_NAME_MAX = 128
LIST_PAGE = 100
MAX_PAGES = 50

STATES = {
    "running": SandboxState.running,
    "paused": SandboxState.paused,
    "pausing": SandboxState.transitioning,
    "resuming": SandboxState.transitioning,
    "creating": SandboxState.transitioning,
    "killing": SandboxState.terminal,
    "killed": SandboxState.terminal,
}


def canonical_deny_out(entries: tuple[str, ...]) -> list[str]:
    """Every IPv4 /0 becomes exactly 0.0.0.0/0, which providers string-match
    (reference 4.2); duplicates go, order stays."""
    out: list[str] = []
    for entry in entries:
        try:
            network = ipaddress.ip_network(entry.strip(), strict=False)
            if network.version == 4 and network.prefixlen == 0:
                entry = DENY_ALL
        except ValueError:
            pass
        if entry not in out:
            out.append(entry)
    return out


@dataclass(frozen=True)
class Remote:
    """What the control plane says about one sandbox (GET /sandboxes/{id})."""

    id: str
    state: SandboxState
    metadata: dict[str, str]
    template: str
    started_at: str | None
    envd_version: str
    envd_token: str | None
    domain: str | None

    def info(self) -> SandboxInfo:
        return SandboxInfo(id=self.id, state=self.state, metadata=dict(self.metadata),
                           template=self.template, started_at=self.started_at)


class E2BCompatible(E2BCommands, E2BFiles, E2BTerminal, TemplateCatalog):
    """The protocol over one E2B-compatible account; subclasses create and resume."""

    provider = "e2b"
    ttl_key = "e2b_sandbox_ttl_seconds"
    default_ttl = 300
    # Reconnect via connect, metadata and list, pause on timeout with auto-resume,
    # timeout refresh, envd filesystem, snapshots that boot as templates, a template
    # catalog, and egress rules the provider enforces. Volumes are not implemented.
    capabilities = Capabilities(reconnect=True, metadata=True, list=True, pause_resume=True,
                                timeout_refresh=True, filesystem=True, snapshots=True,
                                volumes=False, templates=True, egress_rules=True)

    def apply_network_policy(self, sandbox_id: str, policy: ResolvedNetworkPolicy) -> bool:
        raise Unsupported("the provider sets a sandbox's network rules when it creates it; "
                          "new sandboxes get the changed policy")

    def __init__(self, settings: dict[str, Any]):
        self.settings = E2BSettings.from_dict(self.provider, settings, self.ttl_key,
                                              self.default_ttl)
        self._sdk: E2B | None = None
        self._api: Any = None
        self._params: dict[str, Any] = {}
        self._safe_urls: set[str] = set()

    # -- plumbing -------------------------------------------------------------------------

    def _errors(self, what: str, secrets: tuple[str, ...] = ()):
        return io.errors(self.settings, what, secrets)

    def _api_key(self) -> str:
        if not self.settings.api_key:
            raise BackendError(f"{self.provider} backend requires api_key")
        return self.settings.api_key

    @property
    def sdk(self) -> E2B:
        """The per-config SDK client (first use checks the endpoints)."""
        if self._sdk is None:
            self.settings.check_endpoints()
            self._params = self.settings.api_params(self._api_key())
            self._sdk = E2B(**self._params)
        return self._sdk

    @property
    def api(self) -> Any:
        """The SDK's authenticated REST client, for calls whose shape differs by provider."""
        if self._api is None:
            self.sdk  # noqa: B018 - resolves and checks the params
            self._api = get_api_client(ConnectionConfig(**self._params))
        return self._api

    def close(self) -> None:
        if self._api is not None:
            self._api.get_httpx_client().close()
        self._api = None
        self._sdk = None

    def _raise_for(self, response: Any, what: str, secrets: tuple[str, ...] = ()) -> None:
        """A REST answer that is not a success, as a typed error (`secrets` scrubbed)."""
        if response.status_code < 300:
            return
        if response.status_code == 404:
            raise SandboxNotFound(f"{what}: not found at {self.provider} (404)")
        with self._errors(what, secrets):
            raise handle_api_exception(response)

    def _secrets(self, spec: SandboxSpec | None = None) -> tuple[str, ...]:
        if spec is None:
            return ()
        policy = spec.network
        return (*spec.env.values(),
                *(value for rule in policy.host_rules for value in rule.headers.values()),
                *(item.get("secret", "") for rule in policy.cube_rules for item in rule.inject))

    # -- control plane --------------------------------------------------------------------

    def _remote(self, sandbox_id: str, what: str = "get sandbox") -> Remote:
        """The sandbox's detail, if it exists and is ours."""
        missing = SandboxNotFound(f"no such sandbox {sandbox_id[:24]!r}")
        if not sandbox_id or any(c in sandbox_id for c in "/?#% \0"):
            raise missing
        with self._errors(what):
            response = self.api.get_httpx_client().get(f"/sandboxes/{quote(sandbox_id)}")
        if response.status_code == 404:
            raise missing
        self._raise_for(response, what)
        try:
            body = response.json()
            remote = Remote(
                id=str(body["sandboxID"]),
                state=STATES.get(str(body.get("state", "")).lower(), SandboxState.unknown),
                metadata={str(k): str(v) for k, v in (body.get("metadata") or {}).items()},
                template=str(body.get("templateID") or ""),
                started_at=_iso(body.get("startedAt")),
                envd_version=str(body.get("envdVersion") or "0.0.0"),
                envd_token=body.get("envdAccessToken") or None,
                domain=body.get("domain") or None,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BackendError(f"{what}: {self.provider} returned an unreadable sandbox") from None
        if not _ours(remote.metadata):
            raise missing
        return remote

    def health(self) -> None:
        """A cheap authenticated call: one page of at most one of our sandboxes."""
        with self._errors("list sandboxes"):
            self.sdk.Sandbox.list(query=SandboxQuery(metadata={"sandlot_health": "probe"}),
                                  limit=1).next_items()

    def get(self, sandbox_id: str) -> SandboxInfo:
        return self._remote(sandbox_id).info()

    def list(self, metadata: dict[str, str],
             states: frozenset[SandboxState] = LIVE_STATES) -> list[SandboxInfo]:
        """Our sandboxes whose metadata includes every pair given, in `states`."""
        wanted = [sdk for ours, sdk in ((SandboxState.running, SdkState.RUNNING),
                                        (SandboxState.paused, SdkState.PAUSED)) if ours in states]
        if not wanted:
            return []  # the API lists only running and paused sandboxes
        found: list[SandboxInfo] = []
        with self._errors("list sandboxes"):
            pages = self.sdk.Sandbox.list(query=SandboxQuery(metadata=dict(metadata) or None,
                                                             state=wanted), limit=LIST_PAGE)
            for _ in range(MAX_PAGES):
                if not pages.has_next:
                    break
                for item in pages.next_items():
                    state = STATES.get(getattr(item.state, "value", str(item.state)),
                                       SandboxState.unknown)
                    found.append(SandboxInfo(id=item.sandbox_id, state=state,
                                             metadata=dict(item.metadata or {}),
                                             template=item.template_id or "",
                                             started_at=_iso(item.started_at)))
        if pages.has_next:  # an inventory must not be silently short
            raise BackendError(f"list sandboxes: more than {MAX_PAGES * LIST_PAGE} match")
        return [info for info in found if _ours(info.metadata) and info.state in states
                and all(info.metadata.get(k) == v for k, v in metadata.items())]

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create from spec.template (or the config's template_id), running.

        The idle TTL sent is the config's (`e2b_sandbox_ttl_seconds` /
        `cube_sandbox_ttl_seconds`, reference 1.2), not spec.timeout_sec: the TTL is a
        setting of the config, and expiry pauses rather than kills.
        """
        if not _ours(spec.metadata):
            raise BackendError("sandbox metadata needs sandlot_* keys")
        template = spec.template or self.settings.template_id
        if not template:
            raise BackendError(f"{self.provider} backend requires template_id")
        sandbox_id = self._create(spec, template)
        return self.get(sandbox_id)

    def _create(self, spec: SandboxSpec, template: str) -> str:
        raise NotImplementedError

    def connect(self, sandbox_id: str) -> SandboxInfo:
        """Resume a paused sandbox (the provider's connect) and return it running."""
        remote = self._remote(sandbox_id, "resume sandbox")
        if remote.state is SandboxState.terminal:
            raise SandboxNotFound("sandbox is gone")
        self._resume(remote.id)
        return self.get(remote.id)

    def _resume(self, sandbox_id: str) -> None:
        raise NotImplementedError

    def pause(self, sandbox_id: str) -> None:
        """Pause (snapshot and stop) a running sandbox; already paused is a no-op."""
        remote = self._remote(sandbox_id, "pause sandbox")
        if remote.state is SandboxState.paused:
            return
        with self._errors("pause sandbox"):
            self.sdk.Sandbox.pause(remote.id)

    def set_timeout(self, sandbox_id: str, seconds: int) -> None:
        """Refresh the idle TTL (capabilities.timeout_refresh)."""
        remote = self._remote(sandbox_id, "set timeout")
        with self._errors("set timeout"):
            self.sdk.Sandbox.set_timeout(remote.id, int(seconds))

    def delete(self, sandbox_id: str) -> None:
        """Kill the sandbox; one that is already gone is success."""
        try:
            remote = self._remote(sandbox_id, "delete sandbox")
        except SandboxNotFound:
            return
        with self._errors("delete sandbox"):
            self.sdk.Sandbox.kill(remote.id)
        self._forget(remote.id)

    def _forget(self, sandbox_id: str) -> None:
        """Drop anything remembered about a sandbox (Cube's traffic token)."""

    # -- data plane -----------------------------------------------------------------------

    def _data_plane_headers(self, remote: Remote) -> dict[str, str]:
        headers = {"E2b-Sandbox-Id": remote.id, "E2b-Sandbox-Port": str(ENVD_PORT)}
        if remote.envd_token:
            headers["X-Access-Token"] = remote.envd_token
        if self.settings.proxy_url:
            # The gateway routes by authority, as CubeProxy and E2B's edge do.
            domain = remote.domain or self.settings.domain
            headers["Host"] = f"{ENVD_PORT}-{remote.id}.{domain}"
        return headers

    def _handle(self, sandbox_id: str) -> tuple[Sandbox, tuple[str, ...]]:
        """An SDK handle on a running sandbox (paused ones are refused, not resumed),
        and the secrets its requests carry."""
        remote = self._remote(sandbox_id)
        if remote.state is SandboxState.paused:
            raise BackendError("sandbox is paused; resume it with connect()")
        if remote.state is not SandboxState.running:
            raise BackendError(f"sandbox is not running ({remote.state.value})")
        headers = self._data_plane_headers(remote)
        config = ConnectionConfig(extra_sandbox_headers=headers, **self._params)
        if not self.settings.proxy_url:
            # The SDK dials a host named after the provider's answer: guard it too.
            self._check_data_plane(config.get_sandbox_url(
                remote.id, remote.domain or self.settings.domain))
        try:
            version = Version(remote.envd_version)
        except ValueError:
            version = Version("0.0.0")
        handle = self.sdk.Sandbox(sandbox_id=remote.id, sandbox_domain=remote.domain,
                                  envd_version=version, envd_access_token=remote.envd_token,
                                  traffic_access_token=None, connection_config=config)
        secrets = tuple(v for k, v in headers.items() if k.lower().endswith("token"))
        return handle, secrets

    def _check_data_plane(self, url: str) -> None:
        if url in self._safe_urls:
            return
        # Even with private endpoints allowed, the guard still refuses link-local and
        # metadata addresses, which no setting opens.
        io.guard_url(url, f"{self.provider} sandbox URL",
                         allow_private=self.settings.allow_private_endpoints)
        self._safe_urls.add(url)

    # -- snapshots and templates ----------------------------------------------------------

    def snapshot_id_for(self, name: str) -> str:
        """The id of the snapshot named `name` (an abandoned build is found by name), or
        `name` itself when there is none."""
        with self._errors("list snapshots"):
            for snap in self._snapshots():
                if name in (snap.names or ()):
                    return snap.snapshot_id
        return name

    def create_snapshot(self, sandbox_id: str, name: str) -> str:
        """A snapshot of the sandbox; its id boots as a template."""
        if not name or len(name) > SNAPSHOT_NAME_MAX or any(c.isspace() for c in name):
            raise BackendError("snapshot name must be 1-128 characters without spaces")
        remote = self._remote(sandbox_id, "create snapshot")
        with self._errors("create snapshot"):
            snapshot = self.sdk.Sandbox.create_snapshot(remote.id, name=name)
        return snapshot.snapshot_id

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; not found is success."""
        if not snapshot_id:
            return
        with self._errors("delete snapshot"):
            self.sdk.Sandbox.delete_snapshot(snapshot_id)
