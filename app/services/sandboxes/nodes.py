"""Who owns each Docker engine (issue 28 item 2, decisions 17).

A Docker engine belongs to one host. The processes of that host own it (the setting
`SANDBOX_OWN_ENGINES`, default `local`): they use its socket, egress rules, disks and
leftovers directly. Every other process reaches it through a live node of that host:
`flask node` (or `serve` below) takes calls off Redis and runs them there. An engine
nobody here owns and no node serves cannot be used: configs on it are refused at save
and their commands at exec, with a sentence naming the engine.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from flask import current_app

from app.backends.base import Backend, BackendUnavailable
from app.backends.remote.client import RemoteBackend, no_node
from app.backends.remote.link import Link
from app.security.key_agreement import deployment_id
from app.services.sandboxes import endpoints

_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def link(config: Any = None) -> Link | None:
    """The deployment's node keys; None without Redis (then there are no nodes)."""
    config = config if config is not None else current_app.config
    url = config.get("REDIS_URL")
    if not url:
        return None
    with _lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(
                url, socket_timeout=Link.WAIT_SEC + 5, socket_connect_timeout=2)
        client = _clients[url]
    return Link(client, deployment_id(config), list(config.get("SECRETS_KEYS") or []))


def remote_backend(engine: str, settings: dict[str, Any]) -> Backend:
    """The backend for an engine another host owns: its node, through Redis."""
    nodes = link()
    if nodes is None:
        raise no_node(engine)
    return RemoteBackend(nodes, engine, settings)  # type: ignore[return-value]


def live_nodes(engine: str) -> list[dict[str, Any]]:
    nodes = link()
    if nodes is None:
        return []
    try:
        return nodes.live_nodes(engine)
    except redis.RedisError:
        return []


def problem(engine: str) -> str:
    """Why configs cannot use `engine` from here now ("" when they can)."""
    if endpoints.owns(engine) or live_nodes(engine):
        return ""
    return no_node(engine).reason


def enforces_egress(engine: endpoints.Engine) -> bool:
    """Can the egress policy be enforced for this engine's sandboxes? On its own host's
    socket here, or by every live node that serves it."""
    if endpoints.owns(engine.name):
        return engine.local
    nodes = live_nodes(engine.name)
    return bool(nodes) and all(node.get("egress_rules") for node in nodes)


def require_live(engine: str) -> None:
    """Raise BackendUnavailable when nothing here or elsewhere can run `engine`."""
    reason = problem(engine)
    if reason:
        raise BackendUnavailable(reason)
