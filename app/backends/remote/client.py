"""The Docker backend of a process that does not own the engine: every call is handed to
a live node of the engine's host and its answer (a command's live output included) is
read back. It has the same methods and attributes as DockerBackend, so the services use
it without knowing; the node runs the real DockerBackend.

Waiting is bounded by the node's liveness, never by a blind timeout: a call no node has
taken within PICKUP_SEC is withdrawn (BackendUnavailable, nothing ran), and a call
whose node stops heart-beating ends with BackendUnavailable within LIVE_SEC.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from app.backends.base import BackendError, BackendUnavailable, Capabilities, EngineWithoutNode
from app.backends.docker.backend import DockerBackend
from app.backends.docker.carry import Packed
from app.backends.docker.io import DockerSettings
from app.backends.remote import codec
from app.backends.remote.link import Link

PICKUP_SEC = 10.0
# How long one backend (one request's) reuses the live nodes it read: a warm exec makes
# three calls, and one look at the live set serves them all. A node that left within it
# is noticed as one that took no call (PICKUP_SEC), not at once.
NODES_FRESH_SEC = 1.0
# What a caller may ask of a node: DockerBackend's methods, by name (terminals and the
# discarding of a packed install result are the node's own calls, see node.py).
METHODS = frozenset({
    "health", "create", "connect", "get", "get_recent", "list", "delete", "pause", "exec",
    "cancel_exec", "write_file", "read_file", "list_dir", "make_dir", "remove",
    "extract_tar", "create_snapshot", "delete_snapshot", "list_templates",
    "build_template", "build_status", "delete_template", "apply_network_policy",
    "engine_identity", "added_bytes", "changed_paths", "pack", "create_snapshot_carrying",
    "snapshot_id_for"})
CALLBACKS = ("on_output", "on_started")  # exec's live hooks, sent back as events


def no_node(engine: str) -> EngineWithoutNode:
    return EngineWithoutNode(
        f"No Sandlot node serves the Docker engine '{engine}' right now, so its sandboxes "
        "cannot be created or run; ask the operator to start the node on that engine's "
        "host.")


class RemoteBackend:
    """DockerBackend's protocol, served by a node of `engine` over `link`."""

    provider = DockerBackend.provider
    carries_installs = DockerBackend.carries_installs
    install_uid = DockerBackend.install_uid
    snapshot_repo = DockerBackend.snapshot_repo

    def __init__(self, link: Link, engine: str, settings: dict[str, Any]):
        self.link, self.engine = link, engine
        # The node fills in its own URL and TLS files for the engine; the rest is the
        # config's (image, limits, network mode...).
        self.settings = {key: value for key, value in settings.items()
                         if key not in ("host", "tls_cert_path")}
        self.idle_ttl_seconds = DockerSettings.from_dict(settings).idle_ttl_seconds
        self._capabilities: Capabilities | None = None
        self._live: tuple[float, list[dict[str, Any]]] | None = None

    @property
    def capabilities(self) -> Capabilities:
        """DockerBackend's, with egress rules as the engine's node can enforce them."""
        if self._capabilities is None:
            nodes = self._nodes()
            enforces = bool(nodes) and all(node.get("egress_rules") for node in nodes)
            self._capabilities = dataclasses.replace(DockerBackend.capabilities,
                                                     egress_rules=enforces)
        return self._capabilities

    def close(self) -> None:
        """Nothing of the engine's is held here."""

    def engine_identity(self) -> str:
        """The engine's own id, as its live nodes announce it (a node learns it from the
        first call that asks, see node.py); asked of a node when they do not all say the
        same. A session's every command checks it, so this saves a call per command."""
        said = {str((node.get("identities") or {}).get(self.engine) or "")
                for node in self._nodes()}
        if len(said) == 1 and "" not in said:
            return said.pop()
        return str(self.call("engine_identity", {}))

    def open_terminal(self, sandbox_id: str, **kwargs: Any) -> RemoteTerminal:
        term_id = self.call("open_terminal", {"sandbox_id": sandbox_id, **kwargs})
        return RemoteTerminal(self.link, str(term_id))

    # -- the call -----------------------------------------------------------------------

    def _nodes(self) -> list[dict[str, Any]]:
        if self._live is not None and time.monotonic() - self._live[0] < NODES_FRESH_SEC:
            return self._live[1]
        try:
            nodes = self.link.live_nodes(self.engine)
            self._live = (time.monotonic(), nodes) if nodes else None
            return nodes
        except redis.RedisError:
            raise BackendUnavailable("The nodes of the Docker engines cannot be reached "
                                     "(Redis is unavailable); try again shortly.") from None

    def call(self, method: str, args: dict[str, Any],
             hooks: dict[str, Callable[..., None]] | None = None) -> Any:
        """Hand `method(**args)` to a live node of the engine; its answer, or its error."""
        if not self._nodes():
            raise no_node(self.engine)
        hooks = hooks or {}
        call_id = uuid.uuid4().hex
        raw = self.link.pack({"id": call_id, "method": method, "engine": self.engine,
                              "settings": codec.encode(self.settings),
                              "args": codec.encode(args), "hooks": sorted(hooks)})
        calls, reply = self.link.key("calls", self.engine), self.link.key("reply", call_id)
        try:
            self.link.client.rpush(calls, raw)
            return self._answer(calls, reply, raw, hooks)
        except redis.RedisError:
            raise BackendUnavailable("The Docker engine's node could not be reached "
                                     "(Redis is unavailable); try again shortly.") from None

    def _answer(self, calls: str, reply: str, raw: bytes,
                hooks: dict[str, Callable[..., None]]) -> Any:
        taken_by: str | None = None
        pickup_by = time.monotonic() + PICKUP_SEC
        while True:
            item = self.link.client.blpop([reply], timeout=self.link.WAIT_SEC)
            if item is None:
                if taken_by is None and time.monotonic() > pickup_by:
                    if self.link.client.lrem(calls, 1, raw):
                        raise BackendUnavailable(
                            f"The Docker engine '{self.engine}''s node is too busy to take "
                            "the call; nothing was run. Try again shortly.")
                    if time.monotonic() > pickup_by + PICKUP_SEC:  # read, never taken up
                        raise BackendUnavailable(
                            f"The Docker engine '{self.engine}''s node did not take up the "
                            "call (its keys may differ from this host's); nothing was run.")
                elif taken_by is not None and not self.link.alive(taken_by, self.engine):
                    raise BackendUnavailable(
                        f"The node of the Docker engine '{self.engine}' stopped during the "
                        "call; what it was doing may not have finished.")
                continue
            event = self.link.unpack(item[1])
            kind = event.get("t")
            if kind == "taken":
                taken_by = str(event.get("node"))
            elif kind == "out" and "on_output" in hooks:
                hooks["on_output"](int(event["s"]), base64.b64decode(event["d"]))
            elif kind == "started" and "on_started" in hooks:
                hooks["on_started"](str(event["ref"]))
            elif kind == "ok":
                return codec.decode(event.get("v"))
            elif kind == "err":
                codec.raise_error(event)
            else:
                raise BackendError("The Docker engine's node answered something that is "
                                   "not in its protocol.")


def _method(name: str) -> Callable[..., Any]:
    signature = inspect.signature(getattr(DockerBackend, name))

    def remote(self: RemoteBackend, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        given.pop("self")
        for key, value in given.items():  # pack's paths may be any iterable
            if key == "paths":
                given[key] = list(value)
        hooks = {key: given.pop(key) for key in CALLBACKS if key in given}
        hooks = {key: hook for key, hook in hooks.items() if hook is not None}
        answer = self.call(name, given, hooks)
        if isinstance(answer, Packed):
            return RemotePacked(self, answer.path, answer.size, answer.over)
        return answer

    remote.__name__ = remote.__qualname__ = name
    remote.__doc__ = getattr(DockerBackend, name).__doc__
    return remote


for _name in sorted(METHODS - {"engine_identity"}):
    setattr(RemoteBackend, _name, _method(_name))


class RemotePacked(Packed):
    """An install's packed result, kept on the node's host until used or discarded."""

    def __init__(self, backend: RemoteBackend, path: str, size: int, over: bool):
        super().__init__(path, size, over)
        self._backend = backend

    def discard(self) -> None:
        try:
            self._backend.call("discard_packed", {"path": self.path})
        except BackendError:
            pass  # the node sweeps what it packed when it starts again


class RemoteTerminal:
    """A shell on the node's host (base.Terminal), relayed through Redis: keystrokes go
    on `tin`, output comes on `tout`. Reading keeps `talive` fresh; the node closes a
    shell whose caller stopped reading for ALIVE_SEC."""

    ALIVE_SEC = 20
    REFRESH_SEC = 5.0

    def __init__(self, link: Link, term_id: str):
        self.link = link
        self._in, self._out = link.key("tin", term_id), link.key("tout", term_id)
        self._alive = link.key("talive", term_id)
        self._ended = False
        self._refreshed = 0.0
        self._lock = threading.Lock()

    def read(self, timeout: float) -> bytes | None:
        if self._ended:
            return b""
        try:
            now = time.monotonic()
            if now - self._refreshed > self.REFRESH_SEC:
                self.link.client.set(self._alive, b"1", ex=self.ALIVE_SEC)
                self._refreshed = now
            item = (self.link.client.blpop([self._out], timeout=max(timeout, 0.01))
                    if timeout > 0 else self.link.client.lpop(self._out))
        except redis.RedisError:
            self._ended = True
            return b""
        if item is None:
            return None
        event = self.link.unpack(item[1] if isinstance(item, (list, tuple)) else item)
        if "d" in event:
            return base64.b64decode(event["d"])
        self._ended = True
        return b""

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self.link.client.rpush(self._in, self.link.pack(message))
        except redis.RedisError:
            self._ended = True

    def write(self, data: bytes) -> None:
        if not self._ended:
            self._send({"w": base64.b64encode(data).decode("ascii")})

    def resize(self, cols: int, rows: int) -> None:
        if not self._ended:
            self._send({"r": [int(cols), int(rows)]})

    def close(self) -> None:
        with self._lock:
            if self._ended and self._refreshed < 0:
                return
            self._ended, self._refreshed = True, -1.0
        self._send({"c": 1})
        try:
            self.link.client.delete(self._alive)
        except redis.RedisError:
            pass
