"""The per-config image lock: one install or removal per sandbox config at a time.

With Redis (reference 7.2): key `sandlot-skill-image-lock:{tenant}:{config}` set with NX
and a 30 s lease, renewed every 10 s by the run's watcher, released only by its holder.
Without Redis: a row in `skill_image_leases` with the same lease rules, so runs in
several processes sharing one database still take turns. A holder that dies stops
renewing, and the lease runs out on its own; the reaper may also release it early.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from flask import current_app
from sqlalchemy import delete, update
from sqlalchemy.exc import IntegrityError

from app.extensions import db
from app.models import SkillImageLease
from app.models.types import utcnow

LEASE_SEC = 30
RENEW_SEC = 10
POLL_SEC = 0.5
KEY = "sandlot-skill-image-lock:{tenant}:{config}"
# Compare-and-act, so a holder whose lease ran out never renews or frees another's lock.
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then " \
         "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then " \
           "return redis.call('del', KEYS[1]) else return 0 end"


class ImageLock:
    """The image lock of one config, held as `holder` (a run id)."""

    def __init__(self, tenant_id: int, config_id: str, holder: str):
        self.tenant_id, self.config_id, self.holder = tenant_id, config_id, holder
        url = current_app.config.get("REDIS_URL")
        self._redis = _redis(url) if url else None
        self.key = KEY.format(tenant=tenant_id, config=config_id)

    def try_acquire(self) -> bool:
        if self._redis is not None:
            return bool(self._redis.set(self.key, self.holder, nx=True, px=LEASE_SEC * 1000))
        return _db_take(self.config_id, self.holder)

    def acquire(self, cancelled: Callable[[], bool], on_wait: Callable[[], None]) -> bool:
        """Wait for the lock until it is ours (True) or the run is cancelled (False)."""
        waited = False
        while not cancelled():
            if self.try_acquire():
                return True
            if not waited:
                on_wait()
                waited = True
            time.sleep(POLL_SEC)
        return False

    def renew(self) -> bool:
        """Extend the lease; False when it is no longer ours."""
        if self._redis is not None:
            return bool(self._redis.eval(_RENEW, 1, self.key, self.holder, LEASE_SEC * 1000))
        result = db.session.execute(update(SkillImageLease).where(
            SkillImageLease.sandbox_config_id == self.config_id,
            SkillImageLease.holder == self.holder).values(expires_at=_expiry()))
        db.session.commit()
        return result.rowcount == 1

    def release(self) -> None:
        release(self.tenant_id, self.config_id, self.holder)


def release(tenant_id: int, config_id: str, holder: str) -> None:
    """Free the lock if `holder` has it (also what the reaper calls for a dead run)."""
    url = current_app.config.get("REDIS_URL")
    if url:
        _redis(url).eval(_RELEASE, 1, KEY.format(tenant=tenant_id, config=config_id), holder)
        return
    db.session.execute(delete(SkillImageLease).where(
        SkillImageLease.sandbox_config_id == config_id, SkillImageLease.holder == holder))
    db.session.commit()


def _expiry():
    return utcnow() + timedelta(seconds=LEASE_SEC)


def _db_take(config_id: str, holder: str) -> bool:
    """Insert the lease, or take over one whose holder stopped renewing."""
    taken = db.session.execute(update(SkillImageLease).where(
        SkillImageLease.sandbox_config_id == config_id, SkillImageLease.expires_at < utcnow())
        .values(holder=holder, expires_at=_expiry()))
    db.session.commit()
    if taken.rowcount == 1:
        return True
    db.session.add(SkillImageLease(sandbox_config_id=config_id, holder=holder,
                                   expires_at=_expiry()))
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        return False
    return True


def _redis(url: str):
    from redis import Redis

    cache = current_app.extensions.setdefault("sandlot_lock_redis", {})
    if url not in cache:
        cache[url] = Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    return cache[url]
