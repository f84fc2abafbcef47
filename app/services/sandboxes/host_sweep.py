"""This host's leftovers of Docker sandboxes whose container is gone, released on the
reaper's timer (decisions 17: the orphan sweep runs on a timer, not once per process).

A session ended through the API is removed by whichever worker takes its job; when that
process keeps its state elsewhere (another host's directories), the creating host's loop
disk and egress state file stayed until that host restarted. Each reaper pass of a host
that runs Docker sandboxes now looks at most every SWEEP_EVERY_SEC for disks, networks,
rules and state files without a container, and releases them.
"""

from __future__ import annotations

import logging
import threading
import time

from flask import current_app

from app.backends.base import BackendError
from app.services.sandboxes import endpoints
from app.services.sandboxes.provider import backend_for

log = logging.getLogger("sandlot.sandboxes")
SWEEP_EVERY_SEC = 300.0
_last = {"at": float("-inf")}
_lock = threading.Lock()


def sweep(force: bool = False) -> list[str]:
    """The reaper's pass: release leftovers on this host's local engines, at most every
    SWEEP_EVERY_SEC unless `force` (`flask jobs reap`). What was released."""
    if "docker" not in current_app.config["SANDBOX_BACKENDS"]:
        return []
    with _lock:
        now = time.monotonic()
        if not force and now - _last["at"] < SWEEP_EVERY_SEC:
            return []
        _last["at"] = now
    released: list[str] = []
    for engine in endpoints.engines().values():
        if not engine.local or not endpoints.owns(engine.name):
            continue  # its disks and rules are on its own host, swept there
        backend = backend_for({"sandbox_type": "docker", "docker": {"engine": engine.name}})
        try:
            released += backend.sweep_leftovers()
        except BackendError as exc:
            log.warning("sweeping leftovers of engine %s failed: %s", engine.name, exc.reason)
        finally:
            backend.close()
    if released:
        log.info("released leftovers of gone sandboxes: %s", ", ".join(released))
    return released
