"""Docker sandboxes: one long-lived container per sandbox, driven through the docker SDK.

A sandbox is a container running `sleep infinity` under an init, labelled with the
sandbox metadata (decisions 4), with every capability dropped, `no-new-privileges`,
the CPU/memory/pids limits and runtime of its spec (the deployment's defaults and
maxima applied by the services, decisions 12), and a read-only root with a bounded
disk of its own for the places it may write (docker_disk.py). Commands run through
`docker exec` as the image's unprivileged `sandbox` user (uid 1000) unless root is
asked for, under `timeout -s KILL` so the deadline holds inside the container, with a
host-side deadline a little later as a backstop; after a timeout whatever the command
left outside its process group is killed from the host (reap.py).

Only containers carrying `sandlot_*` labels are ours: everything else on the engine is
invisible to this backend (get/exec/delete answer SandboxNotFound, list skips it).

Files: see docker_files.py (archive API for content, exec for the rest, checked as
the requesting user). Engine plumbing (settings, error mapping, the exec stream): see
docker_io.py.

Network (decisions 5): a sandbox with network access joins its own bridge network, and
host nftables rules plus a DNS resolver we run enforce its policy; see egress/. Where
this host cannot enforce (remote or rootless engine, not root, no nft), a policy that
restricts anything is refused, and an open one gets the default bridge.

Idle TTL: Docker has no engine-side idle pause; `idle_ttl_seconds` is exposed for the
job that pauses idle sandboxes.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import docker

from app.backends.base import (
    LIVE_STATES,
    METADATA_PREFIX,
    BackendError,
    Capabilities,
    ExecResult,
    SandboxInfo,
    SandboxNotFound,
    SandboxSpec,
    SandboxStale,
    SandboxState,
    Unsupported,
)
from app.backends.docker import disk as docker_disk
from app.backends.docker import io as docker_io
from app.backends.docker import reap as docker_reap
from app.backends.docker.egress import manager as egress
from app.backends.docker.files import DockerFiles, user_name
from app.backends.docker.images import DockerImages
from app.backends.docker.io import DockerSettings
from app.backends.sandbox_paths import is_ours as _ours

HOST_GRACE_SEC = 5  # host-side backstop after the in-container `timeout`
# A running container seen this recently (inspected, or an exec created in it) is trusted
# to run without another inspect. The look is shared by every backend of the engine in
# this process; an exec whose look was wrong (paused, stopped or removed since by someone
# else) fails at exec create, before anything runs, and raises SandboxStale so that the
# session looks again and resumes or replaces the sandbox (app.services.sessions.binding).
FRESH_SEC = 2.0
_LOOKS: dict[str, dict[str, tuple[float, dict[str, Any]]]] = {}  # engine -> id -> look

STATES = {
    "running": SandboxState.running,
    "paused": SandboxState.paused,
    "created": SandboxState.transitioning,
    "restarting": SandboxState.transitioning,
    "removing": SandboxState.terminal,
    "exited": SandboxState.terminal,
    "dead": SandboxState.terminal,
}

def _iso(created: Any) -> str | None:
    """Creation time as ISO 8601 UTC to the second (list gives epoch, inspect RFC 3339)."""
    if isinstance(created, int | float):
        return datetime.fromtimestamp(int(created), UTC).isoformat()
    if isinstance(created, str) and len(created) >= 19:
        return datetime.strptime(created[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=UTC).isoformat()
    return None


def _metadata(labels: dict[str, str] | None) -> dict[str, str]:
    """Our labels; an empty value is a label masked at create (see `_labels`)."""
    return {k: v for k, v in (labels or {}).items() if k.startswith(METADATA_PREFIX) and v}


def _labels(metadata: dict[str, str], image: dict[str, Any]) -> dict[str, str]:
    """Container labels: the metadata, with sandlot_* labels a snapshot image carries
    from its parent sandbox masked to "", since Docker merges image labels in and
    cannot drop them (a child must never match its parent's session)."""
    inherited = (image.get("Config") or {}).get("Labels") or {}
    masked = {key: "" for key in inherited if key.startswith(METADATA_PREFIX)}
    return {**masked, **metadata}


def _noted(stderr: str, note: str) -> str:
    """stderr with a line of ours at its end, when there is something to say."""
    if not note:
        return stderr
    if stderr and not stderr.endswith("\n"):
        stderr += "\n"
    return f"{stderr}sandlot: {note}\n"


_DISK_POOL = ThreadPoolExecutor(4, thread_name_prefix="sandbox-disk")


def _discard_disk(job: Future) -> None:
    """Release the disk a create made before failing elsewhere."""
    try:
        disk = job.result()
    except BaseException:  # noqa: BLE001 - its own failure is not the one to report
        return
    docker_disk.release(disk.disk_id if disk else None)


class DockerBackend(DockerFiles, DockerImages):
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

    @staticmethod
    def _info(status: str, data: dict[str, Any], labels: dict[str, str] | None,
              image: str) -> SandboxInfo:
        return SandboxInfo(id=data["Id"], state=STATES.get(status, SandboxState.unknown),
                           metadata=_metadata(labels), template=image,
                           started_at=_iso(data.get("Created")))

    def _from_inspect(self, data: dict[str, Any]) -> SandboxInfo:
        config = data["Config"]
        return self._info(data["State"]["Status"], data, config.get("Labels"), config["Image"])

    def _from_summary(self, row: dict[str, Any]) -> SandboxInfo:
        return self._info(row.get("State", ""), row, row.get("Labels"), row.get("Image", ""))

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
        open) and an open policy gets the default bridge.
        """
        if "none" in (self.settings.network_mode, spec.network_mode):
            return egress.NO_NETWORK
        policy = spec.network
        if not policy.allow_internet_access and not policy.allow_out:
            return egress.NO_NETWORK
        reason = self.egress.unavailable_reason() if self.capabilities.egress_rules else (
            "this host cannot enforce network rules (needs root, nftables and a local engine)")
        if reason:
            if policy.restricted:
                raise BackendError(f"this config's network policy cannot be enforced: {reason}. "
                                   "Clear allow_out/deny_out and deny-by-default, or run "
                                   "Sandlot as root next to a local Docker engine")
            return egress.DEFAULT_BRIDGE
        with self._errors("create sandbox network"):
            return self.egress.attach(policy, spec.metadata)

    def _host_config(self, spec: SandboxSpec, network: egress.Attachment,
                     disk: docker_disk.Disk | None) -> dict[str, Any]:
        cpu = spec.cpu_limit or self.settings.cpu_limit
        memory = spec.memory_limit_mb or self.settings.memory_limit_mb
        memory_bytes = memory * (1 << 20) if memory else None
        return self.api.create_host_config(
            cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            auto_remove=False, network_mode=network.network, dns=list(network.dns) or None,
            nano_cpus=int(cpu * 1e9) if cpu else None,
            mem_limit=memory_bytes, memswap_limit=memory_bytes,
            pids_limit=spec.pids_limit or self.settings.pids_limit,
            read_only=disk is not None, mounts=list(disk.mounts) if disk else None,
            runtime=spec.runtime or self.settings.runtime or None)

    def _disk_for(self, spec: SandboxSpec) -> docker_disk.Disk | None:
        """The sandbox's own bounded filesystem (None: writable root, no disk limit)."""
        size = spec.disk_limit_mb or self.settings.disk_limit_mb
        if spec.writable_root or not size:
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
        labels = _labels(spec.metadata, inspected)
        secrets = tuple(spec.env.values())
        # The disk (mkfs, mount) is made while the network and its rules are: neither
        # needs the other, and both are most of a policed cold start.
        disk_job = _DISK_POOL.submit(self._disk_for, spec)
        try:
            network = self._network_for(spec)
        except BaseException:
            _discard_disk(disk_job)
            raise
        disk = None
        try:
            disk = disk_job.result()
            with self._errors("create sandbox", secrets):
                container = self.api.create_container(
                    image, command=["sleep", "infinity"],
                    labels={**labels, **(disk.labels if disk else {})},
                    environment=dict(spec.env),
                    host_config=self._host_config(spec, network, disk))
        except BaseException:
            docker_disk.release(disk.disk_id if disk else None)
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
        return self.get(container["Id"])

    def _release_network(self, egress_id: str | None) -> None:
        if egress_id:
            with self._errors("remove sandbox network"):
                self.egress.release(egress_id)

    def get(self, sandbox_id: str) -> SandboxInfo:
        return self._from_inspect(self._inspect(sandbox_id))

    def get_recent(self, sandbox_id: str) -> SandboxInfo:
        """`get`, answered from a look at the running container taken within FRESH_SEC
        when there is one (an exec on it raises SandboxStale if it no longer holds)."""
        data = self._recent(sandbox_id)
        return self._from_inspect(data) if data is not None else self.get(sandbox_id)

    def list(self, metadata: dict[str, str],
             states: frozenset[SandboxState] = LIVE_STATES) -> list[SandboxInfo]:
        """Our containers whose labels include every `metadata` pair, in `states`."""
        filters = {"label": [f"{key}={value}" for key, value in metadata.items()]}
        with self._errors("list sandboxes"):
            rows = self.api.containers(all=True, filters=filters)
        infos = [self._from_summary(row) for row in rows if _ours(row.get("Labels"))]
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
        docker_disk.release(docker_disk.disk_of(data))
        self._release_network(egress.egress_id_of(data))

    # -- exec -----------------------------------------------------------------------------

    def _run(self, container_id: str, argv: list[str], *, user: str, cwd: str | None,
             env: dict[str, str] | None, deadline_sec: float,
             limit: int, marker: str = "", on_output: docker_io.OnOutput | None = None,
             on_started: Callable[[str], None] | None = None,
             looked: str = "") -> docker_io.RawRun:
        """One exec; `looked` names the sandbox when its running state came from a recent
        look rather than an inspect (a refusal at exec create then raises SandboxStale)."""
        secrets = tuple((env or {}).values())
        started = time.monotonic()
        try:
            with self._errors("exec", secrets):
                exec_id = self.api.exec_create(
                    container_id, argv, stdout=True, stderr=True, user=user, workdir=cwd,
                    environment=dict(env or {}))["Id"]
        except BackendError as exc:
            self._forget(container_id, looked)
            # paused (409), stopped (409) or removed (404) since the look: nothing ran
            if looked and type(exc) in (BackendError, SandboxNotFound):
                raise SandboxStale(exc.reason) from exc
            raise
        self._confirm(container_id, looked)
        with self._errors("exec", secrets):
            if on_started is not None:
                on_started(exec_id)
            response = docker_io.start_exec(self.api, exec_id)
            extra = len(marker) + 8 if marker else 0  # stderr's room for the exit line
            out, raw_err, truncated, hit = docker_io.read_exec(
                response, started + deadline_sec, limit, extra,
                docker_io.HoldBack(on_output, marker) if on_output else None)
            err, code, overflow = docker_io.take_exit_marker(raw_err, marker, limit)
            # stderr below its cap: any truncation was stdout's
            truncated = overflow or (truncated and len(raw_err) < limit + extra)
            if code is None:  # no marker: killed outright, or its stderr overflowed
                code = docker_io.wait_exit_code(self.api, exec_id, 0.2 if hit else 2.0)
        return docker_io.RawRun(out, err, code, time.monotonic() - started, truncated, hit,
                                exec_id)

    def _reap(self, data: dict[str, Any], since_ticks: int, exec_id: str) -> str:
        """After a timeout or a cancel: kill the exec and what it left outside its
        process group, sparing the container's init and every other exec still running
        (reap.py). Returns a sentence for the run's result when leftovers may remain,
        else ""."""
        if not docker_reap.available(self.settings.host):
            return ("processes this command may have left outside its process group "
                    "cannot be ended from here: the Docker engine is not on this host")
        with self._errors("exec inspect"):
            info = self.api.exec_inspect(exec_id)
        target = [int(info["Pid"])] if info.get("Running") and info.get("Pid") else []
        reaped = docker_reap.reap(int(data["State"].get("Pid") or 0), since_ticks,
                                  targets=target)
        if reaped.settled:
            return ""
        return ("some processes this command left were still exiting when it ended; "
                "the sandbox may be short of processes for a moment")

    def exec(self, sandbox_id: str, command: str, *, user: str | None = None,
             cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: int = 60, output_limit: int = 1 << 20,
             on_output: docker_io.OnOutput | None = None,
             on_started: Callable[[str], None] | None = None) -> ExecResult:
        """Run `command` with `sh -c`, killed after `timeout_sec` (exit 137, timed_out).

        `on_output(stream, chunk)` sees the output live (the exit line excluded);
        `on_started(ref)` gets the handle `cancel_exec` takes, before the command starts.

        stdout and stderr are each kept up to `output_limit` bytes (truncated=True when
        more was produced). If the host-side backstop fires first (something kept the
        output open), the result is timed_out with exit code 124 when the engine has
        none yet.
        """
        timeout_sec = timeout_sec if timeout_sec > 0 else 60
        recent = self._recent(sandbox_id)
        data = recent if recent is not None else self._running_data(sandbox_id)
        # The exit code comes back as the last line of stderr, behind a marker the
        # command cannot guess: one engine round trip (exec inspect) less per exec.
        marker = f"\n.sandlot-exit-{secrets.token_hex(8)}:"
        argv = ["sh", "-c", 'timeout -s KILL "$1" sh -c "$2"; c=$?; printf "%s%d" "$3" $c >&2; '
                'exit $c', "sh", str(timeout_sec), command, marker]
        since = docker_reap.now_ticks()
        started = (lambda exec_id: on_started(f"{exec_id}:{since}")) if on_started else None
        run = self._run(data["Id"], argv, user=user_name(user), cwd=cwd, env=env,
                        deadline_sec=timeout_sec + HOST_GRACE_SEC, limit=output_limit,
                        marker=marker, on_output=on_output, on_started=started,
                        looked=sandbox_id if recent is not None else "")
        killed = run.exit_code in (124, 137) and run.elapsed >= timeout_sec
        note = self._reap(data, since, run.exec_id) if killed or run.deadline_hit else ""
        exit_code = run.exit_code if run.exit_code is not None else 124
        return ExecResult(stdout=run.stdout.decode("utf-8", "replace"),
                          stderr=_noted(run.stderr.decode("utf-8", "replace"), note),
                          exit_code=exit_code, duration_ms=int(run.elapsed * 1000),
                          timed_out=killed or run.deadline_hit, truncated=run.truncated)

    def cancel_exec(self, sandbox_id: str, ref: str) -> bool:
        """Kill a running exec's whole process tree, including what left its process
        group (`setsid`) since it started, sparing the container's init and other live
        execs (docker_reap, as after a timeout). False when it had already ended; raises
        Unsupported where the engine's processes cannot be reached from this host."""
        exec_id, _, since = ref.partition(":")
        if not docker_reap.available(self.settings.host):
            raise Unsupported("stopping a running command needs the Docker engine on this host")
        with self._errors("exec inspect"):
            info = self.api.exec_inspect(exec_id)
        if not info.get("Running"):
            return False
        data = self._running_data(sandbox_id)
        self._reap(data, int(since or 0), exec_id)
        return True

