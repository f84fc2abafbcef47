"""The node of an engine host (`flask node`, issue 28 item 2): serves the calls other
hosts hand to the engines this process owns, and does on a timer what only the engine's
host can do."""

from __future__ import annotations

import logging
import threading
from typing import Any

from flask import Flask

from app.backends import registry
from app.backends.base import Backend
from app.backends.remote.node import Node
from app.extensions import db
from app.services.sandboxes import egress_daemons, egress_log, endpoints, host_sweep, nodes

log = logging.getLogger("sandlot.node")
HOUSEKEEPING_SEC = 30.0


def _factory(engine: endpoints.Engine, allow_private: bool):
    def make(settings: dict[str, Any]) -> Backend:
        mine = {**settings, "engine": engine.name, "host": engine.url,
                "tls_cert_path": engine.tls_dir,
                # the operator of the caller decides; this host's switch bounds it
                "allow_private_endpoints": bool(settings.get("allow_private_endpoints"))
                and allow_private}
        return registry.make_backend("docker", mine)
    return make


def make_node(app: Flask, names: list[str] | None = None) -> Node:
    """A node serving `names`, by default the engines this process owns (`flask node`)."""
    with app.app_context():
        names = sorted(endpoints.owned() if names is None else names)
        listed = endpoints.engines()
        unknown = [name for name in names if name not in listed]
        if unknown:
            raise RuntimeError(f"SANDBOX_OWN_ENGINES names engines that are not listed in "
                               f"SANDBOX_DOCKER_ENGINES: {', '.join(unknown)}")
        if not names:
            raise RuntimeError("This process owns no Docker engine: set "
                               "SANDBOX_OWN_ENGINES to the engines of this host.")
        link = nodes.link(app.config)
        if link is None:
            raise RuntimeError("A node needs REDIS_URL: callers reach it through Redis.")
        allow_private = endpoints.private_allowed()
        factories = {name: _factory(listed[name], allow_private) for name in names}
        info = {"engines": names,
                "egress_rules": all(listed[name].local for name in names)
                and bool(registry.capabilities_for("docker").egress_rules)}
    return Node(link, factories, info, max_calls=app.config["NODE_MAX_CALLS"])


def housekeeping(app: Flask, stop: threading.Event, interval: float = HOUSEKEEPING_SEC) -> None:
    """What only the engine's host can do, on a timer: restart its egress daemons where
    sandboxes need them, release the leftovers of sandboxes removed elsewhere, and move
    its egress log into the database."""
    while not stop.wait(interval):
        for name, task in (("egress daemons", egress_daemons.supervise),
                           ("host leftovers", host_sweep.sweep),
                           ("egress log", egress_log.housekeeping)):
            with app.app_context():
                try:
                    task()
                except Exception:  # noqa: BLE001 - one failed pass never stops the node
                    log.warning("%s pass failed", name, exc_info=True)
                finally:
                    db.session.remove()
