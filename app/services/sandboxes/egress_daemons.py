"""This host's egress daemons for Docker sandboxes (the DNS resolver and the egress
gateway, issue 24): the reaper keeps them running while sandboxes need them, and the
sandbox check says whether the gateway is there for a config's sandboxes.

While the gateway is down, a policed sandbox's TCP is redirected to nothing: it fails
closed. Sandbox commands start it again themselves (`revive`); `supervise` does it for
sandboxes that run no command."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from flask import current_app

from app.backends.docker.egress import manager
from app.services.sandboxes import document, endpoints

log = logging.getLogger("sandlot.egress")


def _enforced_here() -> bool:
    return ("docker" in current_app.config["SANDBOX_BACKENDS"] and manager.host_supports()
            and any(engine.local and endpoints.owns(engine.name)
                    for engine in endpoints.engines().values()))


def supervise() -> list[str]:
    """The reaper's pass: start the resolver or the gateway again where sandboxes of this
    host need them and they are not running. Answers what it started."""
    if not _enforced_here():
        return []
    started = manager.Daemons().supervise()
    if started:
        log.warning("the sandbox egress %s was down; started again", " and ".join(started))
    return started


@dataclass(frozen=True)
class GatewayStatus:
    running: bool
    sandboxes: int  # the config's running sandboxes whose connections it decides


def gateway_applies(doc: dict[str, Any]) -> bool:
    """Do this config's sandboxes get their own network, whose TCP this host's gateway
    decides? (Docker on the local engine, a network, and a policy that lets anything out.)"""
    if doc.get("sandbox_type") != "docker" or not _enforced_here():
        return False
    block = doc.get("docker") or {}
    if block.get("network_mode") == "none" or endpoints.engine_of(block) != endpoints.LOCAL \
            or not endpoints.owns(endpoints.LOCAL):
        return False  # another host's gateway decides (and its node's check tells)
    policy = document.resolve_policy(doc)
    return policy.allow_internet_access or bool(policy.allow_out)


def gateway_status(metadata: dict[str, str]) -> GatewayStatus:
    """The gateway, and how many running sandboxes labelled with all of `metadata` (a
    config's labels) depend on it."""
    daemons = manager.Daemons()
    mine = [net for net in daemons.policed() if net.gateway_port
            and all(net.metadata.get(key) == value for key, value in metadata.items())]
    return GatewayStatus(daemons.gateway_running(), len(mine))
