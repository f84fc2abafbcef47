"""The thread beside a run: heartbeat, lock renewal, and stop detection.

Stop is a database write (POST .../stop, from any process); the watcher reads the row
every second and, when the run is no longer wanted, sets `cancelled` and deletes the
maintenance sandbox, which ends whatever command was running in it for real.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from flask import Flask
from sqlalchemy import select, update

from app.extensions import db
from app.models import InstalledSkill
from app.models.types import utcnow
from app.services.sandboxes.provider import backend_for
from app.services.skills.installs.lock import RENEW_SEC, ImageLock

log = logging.getLogger("sandlot.skills.install")


class Watch:
    def __init__(self, app: Flask, skill_id: str, job_id: str, run_id: str, status: str,
                 lock: ImageLock):
        self.app, self.skill_id, self.job_id, self.run_id = app, skill_id, job_id, run_id
        self.status, self.lock = status, lock
        self.cancelled = threading.Event()
        self.reason = ""
        self.locked = False  # set by the run once the lock is ours; then it is renewed
        self.sandbox: tuple[dict[str, Any], str] | None = None  # (config doc, sandbox id)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"skill-watch-{run_id[:8]}",
                                        daemon=True)
        config = app.config
        self.poll = float(config.get("SKILL_INSTALL_WATCH_SECONDS", 1.0))
        self.beat = float(config.get("SKILL_INSTALL_HEARTBEAT_SECONDS", 30))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll + 10)

    def _loop(self) -> None:
        last_beat = last_renew = time.monotonic()
        with self.app.app_context():
            while not self._stop.wait(self.poll):
                now = time.monotonic()
                try:
                    if not self.cancelled.is_set():
                        self._check_wanted()
                    if now - last_beat >= self.beat:
                        self._heartbeat()
                        last_beat = now
                    if self.locked and now - last_renew >= RENEW_SEC:
                        if not self.lock.renew():
                            self.cancel("the install lost its image lock")
                        last_renew = now
                except Exception:  # a missed check is survivable; the next one runs in 1 s
                    log.warning("install watch of %s failed", self.skill_id, exc_info=True)
                finally:
                    db.session.remove()

    def _check_wanted(self) -> None:
        row = db.session.scalar(select(InstalledSkill).where(InstalledSkill.id == self.skill_id))
        if row is None or row.deleted_at is not None or row.stop_requested_at is not None:
            self.cancel("install stopped")
        elif row.job_id != self.job_id or row.install_message_id != self.run_id:
            self.cancel("a newer run of this skill took over")
        elif row.status != self.status:
            self.cancel("install stopped")

    def _heartbeat(self) -> None:
        db.session.execute(update(InstalledSkill).where(
            InstalledSkill.id == self.skill_id, InstalledSkill.install_message_id == self.run_id,
            InstalledSkill.status == self.status).values(installing_since=utcnow()))
        db.session.commit()

    def cancel(self, reason: str) -> None:
        """Mark the run cancelled and kill its maintenance sandbox (ends a running command)."""
        if self.cancelled.is_set():
            return
        self.reason = reason
        self.cancelled.set()
        if self.sandbox is not None:
            doc, sandbox_id = self.sandbox
            backend = backend_for(doc)
            try:
                backend.delete(sandbox_id)
            finally:
                backend.close()
