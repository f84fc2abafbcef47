"""Do the processes of one deployment hold the same keys? (issue 28 item 1)

With REDIS_URL the web processes and workers may run on several hosts, and each reads
SECRET_KEY and SECRETS_KEYS from its own environment. A host that holds other keys does
not fail at start: its sign-ins, API keys and stored secrets just stop working on the
others. So every process, at start (wsgi.py), announces a fingerprint of its SECRET_KEY
and of its SECRETS_KEYS set under the deployment's key in Redis (named after its
database, as the capacity counters are), good for TTL_SEC and renewed while it lives,
and warns once for each live process whose fingerprints differ, naming which key
differs and where that process runs. A fingerprint is a domain-separated SHA-256 prefix;
neither a key nor a fingerprint is ever logged. Without Redis nothing happens: the app
is one process. An unreachable Redis is a warning, never a refusal to start.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import redis
from flask import Flask

log = logging.getLogger("sandlot.keys")
PREFIX = "sandlot:keys:"
TTL_SEC = 300
RENEW_SEC = 100.0
# What a process holding another key breaks, said in the warning.
EFFECTS = {"SECRET_KEY": "sign-ins (and API keys, without API_KEY_PEPPER) made on one do "
                         "not work on the other",
           "SECRETS_KEYS": "secrets one stores may read as unset on the other"}


def fingerprint(secret: str) -> str:
    return hashlib.sha256(b"sandlot key fingerprint\0" + secret.encode()).hexdigest()[:16]


def fingerprints(config: Mapping[str, Any]) -> dict[str, str]:
    """SECRET_KEY's, and the SECRETS_KEYS set's (order aside: any key of it reads a
    secret, whichever of them sealed it)."""
    return {"SECRET_KEY": fingerprint(config.get("SECRET_KEY") or ""),
            "SECRETS_KEYS": fingerprint("\0".join(sorted(config.get("SECRETS_KEYS") or [])))}


def deployment_id(config: Mapping[str, Any]) -> str:
    """Names the deployment in shared Redis keys: two deployments (or test runs) sharing
    one Redis never meet."""
    database = str(config.get("SQLALCHEMY_DATABASE_URI") or "")
    return hashlib.sha256(database.encode()).hexdigest()[:12]


class Announcer:
    """This process's record in Redis, and the warnings about the others."""

    def __init__(self, app: Flask) -> None:
        self.client = redis.Redis.from_url(app.config["REDIS_URL"], socket_timeout=5,
                                           socket_connect_timeout=2, decode_responses=True)
        self.prefix = f"{PREFIX}{deployment_id(app.config)}:"
        self.key = self.prefix + uuid.uuid4().hex
        self.record = {"host": socket.gethostname(), "pid": os.getpid(),
                       **fingerprints(app.config)}
        self.warned: set[str] = set()
        self.stopping = threading.Event()

    def beat(self) -> None:
        """Write this process's record, then warn about live records that differ."""
        self.client.set(self.key, json.dumps(self.record), ex=TTL_SEC)
        for key in self.client.scan_iter(match=self.prefix + "*", count=200):
            if key == self.key or key in self.warned:
                continue
            raw = self.client.get(key)
            if raw is None:  # expired since the scan
                continue
            other = json.loads(raw)
            differ = [name for name in EFFECTS if other.get(name) != self.record[name]]
            if differ:
                self.warned.add(key)
                names = " and ".join(differ)
                log.warning(
                    "%s differ%s between this process and another live process of this "
                    "deployment (host %s, pid %s): %s. Give every process the same %s.",
                    names, "s" if len(differ) == 1 else "", other.get("host", "?"),
                    other.get("pid", "?"), "; ".join(EFFECTS[name] for name in differ), names)

    def _renew(self) -> None:
        while not self.stopping.wait(RENEW_SEC):
            self._beat_or_warn()

    def _beat_or_warn(self) -> None:
        try:
            self.beat()
        except (redis.RedisError, ValueError):
            log.warning("could not compare this process's keys with the deployment's other "
                        "processes (Redis unreachable); will try again", exc_info=True)

    def stop(self) -> None:
        """Stop renewing and take this process's record out (tests; a clean exit)."""
        self.stopping.set()
        try:
            self.client.delete(self.key)
        except redis.RedisError:
            pass  # it expires by itself


def start(app: Flask, renew: bool = True) -> Announcer | None:
    """Announce this process's keys and compare them (with REDIS_URL only); with `renew`,
    a daemon thread keeps the record alive and compares again with newcomers."""
    if not app.config.get("REDIS_URL"):
        return None
    announcer = Announcer(app)
    announcer._beat_or_warn()
    if renew:
        atexit.register(announcer.stop)  # a process that ends cleanly is no longer compared
        threading.Thread(target=announcer._renew, name="sandlot-key-agreement",
                         daemon=True).start()
    app.extensions["sandlot_key_agreement"] = announcer
    return announcer
