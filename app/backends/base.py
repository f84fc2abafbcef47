"""The backend protocol every sandbox provider implements (reference 9.5).

Backends never import models: they take and return the small dataclasses below, and
raise the typed errors below, which the services map to API errors and to the
sandbox check's human reasons.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

METADATA_PREFIX = "sandlot_"


class SandboxState(enum.StrEnum):
    running = "running"
    paused = "paused"
    transitioning = "transitioning"
    terminal = "terminal"
    unknown = "unknown"


LIVE_STATES = frozenset({SandboxState.running, SandboxState.paused, SandboxState.transitioning})


@dataclass(frozen=True)
class Capabilities:
    reconnect: bool = False
    metadata: bool = False
    list: bool = False
    pause_resume: bool = False
    timeout_refresh: bool = False
    filesystem: bool = False
    snapshots: bool = False
    volumes: bool = False
    templates: bool = False
    egress_rules: bool = False  # enforces allow_out / deny_out itself

    def as_dict(self) -> dict[str, bool]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class HostRule:
    """E2B: per-domain header injection (`network.rules[host].transform.headers`)."""

    host: str
    headers: dict[str, str]


@dataclass(frozen=True)
class CubeRule:
    """Cube: one L7 egress rule, secrets already decrypted."""

    name: str
    allow: bool
    scheme: str = ""
    sni: str = ""
    host: str = ""
    methods: tuple[str, ...] = ()
    path: str = ""
    audit: str = ""
    inject: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class ResolvedNetworkPolicy:
    """The stored policy resolved once, at creation (reference 4.3)."""

    allow_internet_access: bool = True
    allow_public_traffic: bool = False
    allow_out: tuple[str, ...] = ()
    deny_out: tuple[str, ...] = ()
    cube_rules: tuple[CubeRule, ...] = ()
    host_rules: tuple[HostRule, ...] = ()
    name: str = ""  # the config's name, for the messages a denial gives (Docker's gateway)

    @property
    def restricted(self) -> bool:
        return bool(self.allow_out or self.deny_out or not self.allow_internet_access)


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. `template` is a Docker image or an E2B/Cube template id."""

    template: str
    metadata: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    timeout_sec: int = 300  # idle lifetime before the provider pauses it
    network: ResolvedNetworkPolicy = field(default_factory=ResolvedNetworkPolicy)
    desktop: bool = False
    cpu_limit: float | None = None
    memory_limit_mb: int | None = None
    pids_limit: int | None = None
    # Docker: size of the sandbox's writable filesystem (/workspace, /tmp, home); the
    # root filesystem is read-only unless `writable_root` (an image build that commits
    # its root, whose writes are then not bounded by the disk limit; it has no disk of
    # its own unless `disk_limit_mb` is set too).
    disk_limit_mb: int | None = None
    writable_root: bool = False
    runtime: str | None = None
    network_mode: str = "bridge"


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    state: SandboxState
    metadata: dict[str, str]
    template: str = ""
    started_at: str | None = None
    # Cube: the per-sandbox traffic access token, given only by create; the caller
    # persists it with the session binding and replays it (reference 4.3). A secret.
    traffic_token: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    exit_code: int
    duration_ms: int
    timed_out: bool = False
    truncated: bool = False
    # Docker's egress gateway: what it refused during this command, [{host, port, count}]
    # (host: the name the connection presented, else the address).
    egress_denied: tuple[dict, ...] = ()
    # With exec(new_files_in=DIR): how many regular files under DIR the command created or
    # changed (at most NEW_FILES_MAX; None when it could not be told).
    new_files: int | None = None


NEW_FILES_MAX = 1000


def new_files_script(folder: str, since: str) -> str:
    """Shell that prints how many regular files under `folder` were modified after the
    epoch `since` (both shell words, e.g. "$4"): GNU find within 2 s, one byte per file
    counted by the shell, so it costs one find and no pipeline; 0 where it cannot tell
    (no such folder, a find without -newermt)."""
    return (f'f=$(timeout 2 find {folder} -type f -newermt "@"{since} -printf . 2>/dev/null); '
            'echo ${#f}')


@dataclass(frozen=True)
class FileEntry:
    name: str
    path: str
    is_dir: bool
    size: int


@dataclass(frozen=True)
class TemplateInfo:
    """One catalog entry (reference 3.1.7). `status` is `ready`, `building`, `failed` or
    `untagged` (built without the `default` tag: it will never become ready)."""

    id: str
    name: str
    status: str = "ready"
    version: str = ""
    image: str = ""
    created_at: str | None = None
    updated_at: str | None = None
    error: str = ""
    instance_type: str = ""
    network_type: str = ""
    allow_internet_access: bool | None = None


@dataclass(frozen=True)
class TemplateBuild:
    """A template build the provider accepted, or its state when polled."""

    template_id: str
    build_id: str
    status: str = "building"  # building | ready | failed
    error: str = ""


class BackendError(Exception):
    """Base of every backend failure; `reason` is a short human sentence."""

    kind = "error"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class BackendUnavailable(BackendError):
    kind = "unavailable"


class EngineWithoutNode(BackendUnavailable):
    """A Docker engine of another host with no live node to hand the call to (issue
    28): nothing was run."""


class BackendAuthError(BackendError):
    kind = "auth"


class SandboxNotFound(BackendError):
    kind = "not_found"


class SandboxStale(BackendError):
    """A recent look at the sandbox no longer holds (paused, stopped or removed since,
    by someone else): nothing ran; look at it again (get) and retry."""


class SandboxHeldElsewhere(BackendError):
    """The sandbox exists, but what this process needs to run it safely is kept by
    another (Docker: the egress state it was created with is in another host's state
    directory): nothing was started."""


class SandboxPathNotFound(BackendError):
    """A file or directory inside an existing sandbox does not exist."""

    kind = "path_not_found"


class BackendTimeout(BackendError):
    kind = "timeout"


class QuotaExceeded(BackendError):
    kind = "quota"


class Unsupported(BackendError):
    kind = "unsupported"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what caused it (`__cause__`, else `__context__`), each once: where
    a provider's failure is translated into the errors above, the reason is often a
    few links down the chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class Terminal(Protocol):
    """An interactive shell on a pseudo-terminal in a sandbox (issue 26): what the web
    terminal relays. Reads and writes may come from two threads at once."""

    def read(self, timeout: float) -> bytes | None:
        """The shell's next output; None when nothing came within `timeout` seconds, b""
        once the shell has ended (and for ever after)."""

    def write(self, data: bytes) -> None:
        """Keystrokes, as the terminal sends them (b"\\x03" is Ctrl-C)."""

    def resize(self, cols: int, rows: int) -> None: ...

    def close(self) -> None:
        """End the shell and everything it started, and free what the relay holds;
        idempotent, and safe while another thread is in `read`."""


@runtime_checkable
class Backend(Protocol):
    """One provider client, bound to one config's connection settings."""

    provider: str
    capabilities: Capabilities

    def health(self) -> None:
        """Raise a BackendError when the provider cannot be used."""

    def create(self, spec: SandboxSpec) -> SandboxInfo: ...

    def connect(self, sandbox_id: str) -> SandboxInfo:
        """Resume a paused sandbox and return it running."""

    def get(self, sandbox_id: str) -> SandboxInfo: ...

    def list(self, metadata: dict[str, str],
             states: frozenset[SandboxState] = LIVE_STATES) -> list[SandboxInfo]: ...

    def delete(self, sandbox_id: str) -> None:
        """Idempotent: a sandbox that is already gone is success."""

    def pause(self, sandbox_id: str) -> None: ...

    def exec(self, sandbox_id: str, command: str, *, user: str | None = None,
             cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: int = 60, output_limit: int = 1 << 20,
             new_files_in: str | None = None) -> ExecResult: ...

    # Filesystem. `user` is whose rights (and, for writes, whose ownership) apply:
    # the provider's unprivileged sandbox user by default, "root" when asked.
    # Relative paths are relative to the sandbox's working dir (/workspace).

    def write_file(self, sandbox_id: str, path: str, data: bytes, *,
                   user: str | None = None) -> None:
        """Create or replace a file, creating missing parent directories."""

    def read_file(self, sandbox_id: str, path: str, *, user: str | None = None) -> bytes:
        """Raise SandboxPathNotFound when there is no such regular file."""

    def list_dir(self, sandbox_id: str, path: str, *,
                 user: str | None = None) -> list[FileEntry]:
        """Entries directly in `path`, sorted by name; SandboxPathNotFound if none."""

    def make_dir(self, sandbox_id: str, path: str, *, user: str | None = None) -> None:
        """`mkdir -p` semantics."""

    def remove(self, sandbox_id: str, path: str, *, user: str | None = None) -> None:
        """`rm -rf` semantics: a path that is already gone is success."""

    def extract_tar(self, sandbox_id: str, directory: str, data: bytes) -> None:
        """Unpack one tar stream into an existing `directory`, as root (skill seeding)."""

    def create_snapshot(self, sandbox_id: str, name: str) -> str:
        """Optional (capabilities.snapshots); raise Unsupported otherwise."""

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Optional; idempotent: not found is success."""

    def list_templates(self) -> list[TemplateInfo]:
        """Optional (capabilities.templates); raise Unsupported otherwise."""

    def build_template(self, name: str, image: str,
                       tags: tuple[str, ...] = ("default",)) -> TemplateBuild:
        """Optional (E2B/Cube): start building template `name` from `image`."""

    def build_status(self, template_id: str, build_id: str) -> TemplateBuild:
        """Optional (E2B/Cube): where a build stands."""

    def delete_template(self, template_id: str) -> None:
        """Optional (E2B/Cube): delete a template; not found is success."""

    def apply_network_policy(self, sandbox_id: str, policy: ResolvedNetworkPolicy) -> bool:
        """Optional (capabilities.egress_rules): enforce a changed policy on a running
        sandbox; False when it has no policed network of its own. Unsupported otherwise."""

    def open_terminal(self, sandbox_id: str, *, user: str | None = None,
                      cwd: str | None = None, env: dict[str, str] | None = None,
                      cols: int = 80, rows: int = 24) -> Terminal:
        """An interactive login shell on a PTY of `cols` x `rows`, as `user` (the
        sandbox user by default) in `cwd` (/workspace by default) with `env` added."""

    def close(self) -> None:
        """Release connections; the backend is not used afterwards."""
