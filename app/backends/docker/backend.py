"""Docker sandboxes: one long-lived container per sandbox, driven through the docker SDK.

A sandbox is a container running `sleep infinity` under an init, labelled with the
sandbox metadata (decisions 4), with every capability dropped, `no-new-privileges`,
the CPU/memory/pids limits and runtime of its spec (the deployment's defaults and
maxima applied by the services, decisions 12), and a read-only root with a bounded
disk of its own for the places it may write (disk.py). Commands (commands.py) run
through `docker exec` as the image's unprivileged `sandbox` user (uid 1000) unless root
is asked for, under `timeout -s KILL` so the deadline holds inside the container, with a
host-side deadline a little later as a backstop; after a timeout whatever the command
left outside its process group is killed from the host (reap.py).

Only containers carrying `sandlot_*` labels are ours: everything else on the engine is
invisible to this backend (get/exec/delete answer SandboxNotFound, list skips it).
How a container's labels, state and creation time read as a SandboxInfo: containers.py.

Files: see files.py (archive API for content, exec for the rest, checked as the
requesting user). Engine plumbing (settings, error mapping, the exec stream): see io.py.

Network (decisions 5): a sandbox with network access joins its own bridge network, and
host nftables rules plus a DNS resolver we run enforce its policy; see egress/. Where
this host cannot enforce (remote or rootless engine, not root, no nft), a policy that
restricts anything is refused, and an open one gets the default bridge.

Idle TTL: Docker has no engine-side idle pause; `idle_ttl_seconds` is exposed for the
job that pauses idle sandboxes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import docker

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
from app.backends.docker import containers, exec_agent
from app.backends.docker import disk as docker_disk
from app.backends.docker import io as docker_io
from app.backends.docker.carry import DockerCarry
from app.backends.docker.commands import DockerCommands
from app.backends.docker.egress import manager as egress
from app.backends.docker.files import DockerFiles
from app.backends.docker.images import DockerImages
from app.backends.docker.io import DockerSettings
from app.backends.docker.terminal import DockerTerminal
from app.backends.sandbox_paths import is_ours as _ours

# A running container seen this recently (inspected, or an exec created in it) is trusted
# to run without another inspect. The look is shared by every backend of the engine in
# this process; an exec whose look was wrong (paused, stopped or removed since by someone
# else) fails at exec create, before anything runs, and raises SandboxStale so that the
# session looks again and resumes or replaces the sandbox (app.services.sessions.binding).
FRESH_SEC = 2.0
_LOOKS: dict[str, dict[str, tuple[float, dict[str, Any]]]] = {}  # engine -> id -> look
_ENGINE_IDS: dict[str, str] = {}  # engine url -> the engine's own id (engine_identity)

_DISK_POOL = ThreadPoolExecutor(4, thread_name_prefix="sandbox-disk")


def _discard_disk(job: Future) -> None:
    """Release the disk a create made before failing elsewhere."""
    try:
        disk = job.result()
    except BaseException:  # noqa: BLE001 - its own failure is not the one to report
        return
    docker_disk.release(disk.disk_id if disk else None, disk.directory if disk else None)


class DockerBackend(DockerCommands, DockerFiles, DockerImages, DockerCarry, DockerTerminal):
    """The sandbox protocol on a Docker engine (local unix socket or tcp+TLS)."""

    provider = "docker"
    # egress_rules: per-sandbox networks + host nftables enforce allow/deny (egress/);
    # an engine that is not local (see __init__) cannot be enforced from here.
    capabilities = Capabilities(reconnect=True, metadata=True, list=True, pause_resume=True,
                                filesystem=True, snapshots=True, templates=True,
                                egress_rules=egress.host_supports())

    def __init__(self, settings: dict[str, Any]):
        self.settings = DockerSettings.from_dict(settings)
        self.idle_ttl_seconds = self.settings.idle_ttl_seconds
        self._client: docker.APIClient | None = None
        self._egress: egress.EgressManager | None = None
        # id -> (when, inspect); per engine, so the next request's backend reuses it
        self._seen = _LOOKS.setdefault(self.settings.host, {})
        if not self.settings.host.startswith("unix://"):
            self.capabilities = dataclasses.replace(self.capabilities, egress_rules=False)

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _errors(self, what: str, secrets: tuple[str, ...] = ()) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - every engine failure becomes a typed one
            error = docker_io.translate(exc, self.settings.host,
                                        self.settings.http_timeout_sec, what, secrets)
            if error is exc:
                raise
            if secrets:
                raise error from None  # the original may carry request bodies
            raise error from exc

    @property
    def api(self) -> docker.APIClient:
        """This engine's client, shared by every backend of the process (one version
        handshake per engine, pooled connections; see docker_io.shared_client)."""
        if self._client is None:
            with self._errors("connect"):
                self._client = docker_io.shared_client(self.settings)
        return self._client

    @property
    def egress(self) -> egress.EgressManager:
        if self._egress is None:
            self._egress = egress.shared_manager(self.api, self.settings.host)
        return self._egress

    def close(self) -> None:
        """Forget the client; the shared one (and the engine's looks) stay for the next
        backend."""
        self._client = None
        self._egress = None

    def _inspect(self, sandbox_id: str) -> dict[str, Any]:
        """The container, if it exists and is ours."""
        missing = SandboxNotFound(f"no such sandbox {sandbox_id[:12]!r}")
        if not sandbox_id:
            raise missing
        try:
            with self._errors("inspect"):
                data = self.api.inspect_container(sandbox_id)
        except SandboxNotFound:
            raise missing from None
        if not _ours(data["Config"].get("Labels")):
            raise missing
        self._seen[data["Id"]] = self._seen[sandbox_id] = (time.monotonic(), data)
        return data

    def _running(self, sandbox_id: str) -> str:
        return self._running_data(sandbox_id)["Id"]

    def _recent(self, sandbox_id: str) -> dict[str, Any] | None:
        """A look at a running container taken within FRESH_SEC, if any."""
        when, data = self._seen.get(sandbox_id, (0.0, {}))
        if data and data["State"]["Status"] == "running" and \
                time.monotonic() - when < FRESH_SEC:
            return data
        return None

    def _confirm(self, *ids: str) -> None:
        """An exec was just created in the container: it runs, so its look is renewed."""
        now = time.monotonic()
        for key in ids:
            _, data = self._seen.get(key, (0.0, {}))
            if data and data["State"]["Status"] == "running":
                self._seen[key] = (now, data)

    def _forget(self, *ids: str) -> None:
        for key in ids:
            self._seen.pop(key, None)

    def _running_data(self, sandbox_id: str) -> dict[str, Any]:
        """The inspected container, which must be running; a look taken moments ago (the
        session's `get_recent`, or an earlier exec) is reused rather than asked again."""
        data = self._recent(sandbox_id)
        if data is not None:
            return data
        data = self._inspect(sandbox_id)
        status = data["State"]["Status"]
        if status == "paused":
            raise BackendError("sandbox is paused; resume it with connect()")
        if status != "running":
            raise BackendError(f"sandbox is not running ({status})")
        return data

    # -- lifecycle ------------------------------------------------------------------------

    def health(self) -> None:
        """Ping the engine, then check the configured image is there."""
        with self._errors("ping"):
            self.api.ping()
        if self.settings.image:
            self._require_image(self.settings.image)

    def _require_image(self, image: str) -> dict[str, Any]:
        try:
            with self._errors("inspect image"):
                try:
                    return self.api.inspect_image(image)
                except docker.errors.NotFound:
                    raise SandboxNotFound(image) from None
        except SandboxNotFound:
            raise BackendError(f"Docker image {image} not found on {self.settings.host}; "
                               "build it (scripts/sandbox-image.sh) or fix the image") from None

    def _network_for(self, spec: SandboxSpec) -> egress.Attachment:
        """The network a new sandbox joins, created (with its rules) when it is its own.

        No network at all when the policy allows nothing (no internet access and no
        allow_out) or the config says none. Otherwise its own network whose egress the
        host enforces (allow > deny > default; the host and special-use ranges refused).
        When this host cannot enforce, a restricting policy is an error (never run
        open); an open policy gets the default bridge only on a local engine (a host
        without root or nftables), never on an engine of another host.
        """
        if "none" in (self.settings.network_mode, spec.network_mode):
            return egress.NO_NETWORK
        policy = spec.network
        if not policy.allow_internet_access and not policy.allow_out:
            return egress.NO_NETWORK
        reason = self.egress.unavailable_reason() if self.capabilities.egress_rules else (
            "this host cannot enforce network rules (needs root, nftables and a local engine)")
        if reason:
            if not self.settings.host.startswith("unix://"):
                raise BackendError("this engine is on another host, where this deployment "
                                   "cannot enforce a network policy (nor its always-on "
                                   "denies): only sandboxes without network run there")
            if policy.restricted:
                raise BackendError(f"this config's network policy cannot be enforced: {reason}. "
                                   "Clear allow_out/deny_out and deny-by-default, or run "
                                   "Sandlot as root next to a local Docker engine")
            return egress.DEFAULT_BRIDGE
        with self._errors("create sandbox network"):
            return self.egress.attach(policy, spec.metadata)

    def _host_config(self, spec: SandboxSpec, network: egress.Attachment,
                     disk: docker_disk.Disk | None,
                     agent: exec_agent.AgentDir | None = None) -> dict[str, Any]:
        cpu = spec.cpu_limit or self.settings.cpu_limit
        memory = spec.memory_limit_mb or self.settings.memory_limit_mb
        memory_bytes = memory * (1 << 20) if memory else None
        return self.api.create_host_config(
            cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            auto_remove=False, network_mode=network.network, dns=list(network.dns) or None,
            nano_cpus=int(cpu * 1e9) if cpu else None,
            mem_limit=memory_bytes, memswap_limit=memory_bytes,
            pids_limit=spec.pids_limit or self.settings.pids_limit,
            read_only=disk is not None and not spec.writable_root,
            mounts=[*(disk.mounts if disk else ()), *(agent.mounts if agent else ())] or None,
            runtime=spec.runtime or self.settings.runtime or None)

    def _disk_for(self, spec: SandboxSpec) -> docker_disk.Disk | None:
        """The sandbox's own bounded filesystem (None: writable root, no disk limit). A
        writable root with an explicit disk limit gets both (an install's root step)."""
        size = spec.disk_limit_mb or self.settings.disk_limit_mb
        if not size or (spec.writable_root and not spec.disk_limit_mb):
            return None
        docker_disk.sweep_once(self.api, self.settings.host)
        return docker_disk.create(size, self.settings.host)

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create and start a labelled container from spec.template (or the config image)."""
        if spec.desktop:
            raise Unsupported("desktop sandboxes need the E2B or Cube backend")
        if not _ours(spec.metadata):
            raise BackendError("sandbox metadata needs sandlot_* keys")
        image = spec.template or self.settings.image
        if not image:
            raise BackendError("Image is required: name an image on the engine")
        inspected = self._require_image(image)
        self._check_snapshot_owner(inspected, spec.metadata)
        labels = containers.labels_for(spec.metadata, inspected)
        secrets = tuple(spec.env.values())
        # The disk (mkfs, mount) is made while the network and its rules are: neither
        # needs the other, and both are most of a policed cold start.
        disk_job = _DISK_POOL.submit(self._disk_for, spec)
        try:
            network = self._network_for(spec)
        except BaseException:
            _discard_disk(disk_job)
            raise
        disk = agent = None
        try:
            disk = disk_job.result()
            agent = exec_agent.create() if exec_agent.available(self.settings.host) else None
            # Always set: a snapshot image carries its parent's agent labels.
            agent_labels = agent.labels if agent else {exec_agent.LABEL: "",
                                                       exec_agent.DIR_LABEL: ""}
            with self._errors("create sandbox", secrets):
                container = self.api.create_container(
                    image, command=["sleep", "infinity"],
                    labels={**labels, **(disk.labels if disk else {}), **agent_labels},
                    environment=dict(spec.env),
                    host_config=self._host_config(spec, network, disk, agent))
        except BaseException:
            exec_agent.release(agent)
            docker_disk.release(disk.disk_id if disk else None, disk.directory if disk else None)
            try:
                self._release_network(network.egress_id)
            except BackendError:
                pass  # the first error is the one to report; cleanup_orphans gets the rest
            raise
        try:
            with self._errors("start sandbox", secrets):
                self.api.start(container["Id"])
        except BackendError:
            self.delete(container["Id"])
            raise
        data = self._inspect(container["Id"])
        if agent is not None:
            exec_agent.launch(self.api, data, self.settings.host)
        return containers.from_inspect(data)

    def _release_network(self, egress_id: str | None) -> None:
        if egress_id:
            with self._errors("remove sandbox network"):
                self.egress.release(egress_id)

    def get(self, sandbox_id: str) -> SandboxInfo:
        return containers.from_inspect(self._inspect(sandbox_id))

    def sweep_leftovers(self) -> list[str]:
        """Release what sandboxes of this engine left on this host once their container
        went (removed by another process, an operator or a crash): loop disks, exec
        agent directories, and networks, rules and state files. Whatever is young enough
        to belong to a create in progress is kept. What was released, as "disk <id>",
        "agent dir <token>" and "network <id>"."""
        released = []
        if docker_disk.loop_available(self.settings.host):
            with self._errors("release leftover sandbox disks"):
                released += [f"disk {d}" for d in docker_disk.sweep_orphans(self.api)]
        if exec_agent.available(self.settings.host):
            with self._errors("release leftover exec agent directories"):
                released += [f"agent dir {d}" for d in exec_agent.sweep_orphans(self.api)]
        if self.capabilities.egress_rules and self.egress.unavailable_reason() is None:
            with self._errors("release leftover sandbox networks"):
                released += [f"network {n}" for n in self.egress.cleanup_orphans()]
        return released

    def engine_identity(self) -> str:
        """The engine's own id (`docker info`'s ID, kept across its restarts), asked once
        per process: two hosts' engines listed under one name tell apart by it."""
        found = _ENGINE_IDS.get(self.settings.host)
        if found is None:
            with self._errors("identify the engine"):
                found = _ENGINE_IDS[self.settings.host] = str(self.api.info().get("ID") or "")
        return found

    def apply_network_policy(self, sandbox_id: str, policy: ResolvedNetworkPolicy) -> bool:
        """The host's rules, resolver and gateway of a running sandbox follow `policy`.
        False when the sandbox has no network of its own (none, or the default bridge of
        an open policy): it keeps what it was created with."""
        egress_id = egress.egress_id_of(self._inspect(sandbox_id))
        if egress_id is None:
            return False
        with self._errors("apply the network policy"):
            self.egress.update_policy(egress_id, policy)
        return True

    def get_recent(self, sandbox_id: str) -> SandboxInfo:
        """`get`, answered from a look at the running container taken within FRESH_SEC
        when there is one (an exec on it raises SandboxStale if it no longer holds)."""
        data = self._recent(sandbox_id)
        return containers.from_inspect(data) if data is not None else self.get(sandbox_id)

    def list(self, metadata: dict[str, str],
             states: frozenset[SandboxState] = LIVE_STATES) -> list[SandboxInfo]:
        """Our containers whose labels include every `metadata` pair, in `states`."""
        filters = {"label": [f"{key}={value}" for key, value in metadata.items()]}
        with self._errors("list sandboxes"):
            rows = self.api.containers(all=True, filters=filters)
        infos = [containers.from_summary(row) for row in rows if _ours(row.get("Labels"))]
        return [info for info in infos if info.state in states]

    def connect(self, sandbox_id: str) -> SandboxInfo:
        """Resume a paused sandbox (or start a stopped one) and return it running."""
        data = self._inspect(sandbox_id)
        status = data["State"]["Status"]
        egress_id = egress.egress_id_of(data)
        if egress_id and status in ("paused", "created", "exited"):
            with self._errors("restore sandbox network rules"):
                self.egress.ensure(egress_id)
        with self._errors("resume sandbox"):
            if status == "paused":
                self.api.unpause(data["Id"])
            elif status in ("created", "exited"):
                self.api.start(data["Id"])
            elif status in ("dead", "removing"):
                raise SandboxNotFound(f"sandbox is gone ({status})")
        return self.get(data["Id"])

    def pause(self, sandbox_id: str) -> None:
        data = self._inspect(sandbox_id)
        status = data["State"]["Status"]
        if status == "paused":
            return
        if status != "running":
            raise BackendError(f"cannot pause a sandbox that is {status}")
        self._forget(sandbox_id, data["Id"])  # no exec may trust the look taken before this
        with self._errors("pause sandbox"):
            self.api.pause(data["Id"])

    def delete(self, sandbox_id: str) -> None:
        """Force-remove the container and its anonymous volumes; gone already is fine."""
        try:
            data = self._inspect(sandbox_id)
        except SandboxNotFound:
            return
        try:
            with self._errors("delete sandbox"):
                self.api.remove_container(data["Id"], force=True, v=True)
        except SandboxNotFound:
            pass
        except BackendError as exc:
            if "already in progress" not in exc.reason:
                raise
        self._forget(sandbox_id, data["Id"])
        exec_agent.release(exec_agent.of(data))
        docker_disk.release(docker_disk.disk_of(data), docker_disk.directory_of(data))
        self._release_network(egress.egress_id_of(data))
