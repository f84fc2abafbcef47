"""Shared capacity held for a while, counted across processes (decisions 17; issue 26,
issue 28 item 1): open web terminals, event streams, command runs, file transfers.

Each use is a lease in a counter per scope (the session, the member or API key, the
workspace), good for LEASE_SEC and renewed every RENEW_SEC by one thread per process for
as long as the use lasts, so the uses of a process that died stop counting within
LEASE_SEC. With REDIS_URL the counters are Redis sorted sets (lease ids scored by their
expiry; one Lua script checks every limit and takes the lease, so two processes never
both take the last place); without Redis the app is one process and they live in it.
Counters are named after the deployment's database, so two deployments (or two test
workers) sharing one Redis never count each other's uses.
Past a limit the answer is 429 `quota_exceeded` naming the limit and the use; an
unreachable Redis is a 503.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from flask import Flask, current_app

from app.errors import Unavailable
from app.security.key_agreement import deployment_id
from app.services.quotas import OverQuota

log = logging.getLogger("sandlot.capacity")
LEASE_SEC = 60
RENEW_SEC = 15.0
PREFIX = "sandlot:capacity:"


@dataclass(frozen=True)
class Limit:
    name: str  # the quota's name in the 429: "terminals_per_session"
    scope: str  # "session", "member" or "workspace"
    limit: int


@dataclass(frozen=True)
class Use:
    kind: str  # "terminal", "stream", "run", "file_transfer"
    tenant_id: int
    holder: str  # the member ("user:12") or API key ("api-key:ab12cd") it counts against
    session_id: str | None = None

    def key(self, scope: str) -> str:
        ident = {"session": self.session_id, "member": self.holder,
                 "workspace": ""}[scope]
        return f"{self.kind}:{self.tenant_id}:{scope}:{ident}"


def _refuse(limit: Limit, used: int, noun: str, advice: str) -> OverQuota:
    return OverQuota.of(limit.name, limit.limit, used, (
        f"A {limit.scope} may have at most {limit.limit} {noun} at once, and {used} "
        f"{'is' if used == 1 else 'are'} in use; {advice}"))


def check(use: Use, limits: tuple[Limit, ...], noun: str, advice: str) -> None:
    """429 when one more `use` would be past a limit (nothing is taken)."""
    counts = _store().count([use.key(limit.scope) for limit in limits])
    for limit, used in zip(limits, counts, strict=True):
        if used >= limit.limit:
            raise _refuse(limit, used, noun, advice)


def admit(use: Use, limits: tuple[Limit, ...], noun: str, advice: str) -> str:
    """Take one more `use` (its lease id, for `release`), or 429."""
    lease = uuid.uuid4().hex
    keys = [use.key(limit.scope) for limit in limits]
    refused = _store().take(lease, keys, [limit.limit for limit in limits])
    if refused is not None:
        index, used = refused
        raise _refuse(limits[index], used, noun, advice)
    _renewer(current_app._get_current_object()).add(lease, keys)
    return lease


def release(lease: str) -> None:
    """Give the lease back (from any thread with an app context); idempotent."""
    keys = _renewer(current_app._get_current_object()).discard(lease)
    if keys:
        _store().drop(lease, keys)


@contextmanager
def holding(use: Use, limits: tuple[Limit, ...], noun: str, advice: str) -> Iterator[str]:
    """Hold `use` for the block."""
    lease = admit(use, limits, noun, advice)
    try:
        yield lease
    finally:
        release(lease)


def used(use: Use, scope: str) -> int:
    """How many uses of `use`'s kind its `scope` holds now (tests, the dashboard)."""
    return _store().count([use.key(scope)])[0]


# -- where the counters live --------------------------------------------------------------

# KEYS: the scopes' sorted sets. ARGV: now, expiry, lease, then one limit per key.
# Returns {index, used} of the first limit reached (0-based), or {-1, 0} once taken.
TAKE = """
local now, expiry, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local used = redis.call('ZCARD', key)
  if used >= tonumber(ARGV[3 + i]) then return {i - 1, used} end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, expiry, lease)
  redis.call('EXPIRE', key, math.ceil(expiry - now) + 60)
end
return {-1, 0}
"""


class RedisStore:
    def __init__(self, url: str, prefix: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        self.script = self.client.register_script(TAKE)
        self.prefix = prefix

    def take(self, lease: str, keys: list[str], limits: list[int]) -> tuple[int, int] | None:
        now = time.time()
        with _reachable():
            index, used = self.script(keys=[self.prefix + k for k in keys],
                                      args=[now, now + LEASE_SEC, lease, *limits])
        return None if index < 0 else (int(index), int(used))

    def count(self, keys: list[str]) -> list[int]:
        now = time.time()
        with _reachable():
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.zcount(self.prefix + key, now, "+inf")
            return [int(n) for n in pipe.execute()]

    def renew(self, leases: dict[str, list[str]]) -> None:
        expiry = time.time() + LEASE_SEC
        pipe = self.client.pipeline(transaction=False)
        for lease, keys in leases.items():
            for key in keys:
                pipe.zadd(self.prefix + key, {lease: expiry}, xx=True)
        pipe.execute()

    def drop(self, lease: str, keys: list[str]) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.zrem(self.prefix + key, lease)
            pipe.execute()
        except redis.RedisError:  # its lease runs out by itself
            log.warning("capacity lease %s was not given back", lease)


class MemoryStore:
    """One process without Redis: the same counters in memory."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sets: dict[str, dict[str, float]] = {}

    def _live(self, key: str, now: float) -> dict[str, float]:
        leases = self.sets.setdefault(key, {})
        for lease in [lease for lease, expiry in leases.items() if expiry <= now]:
            del leases[lease]
        return leases

    def take(self, lease: str, keys: list[str], limits: list[int]) -> tuple[int, int] | None:
        now = time.time()
        with self.lock:
            for index, (key, limit) in enumerate(zip(keys, limits, strict=True)):
                if len(self._live(key, now)) >= limit:
                    return index, len(self.sets[key])
            for key in keys:
                self.sets[key][lease] = now + LEASE_SEC
        return None

    def count(self, keys: list[str]) -> list[int]:
        now = time.time()
        with self.lock:
            return [len(self._live(key, now)) for key in keys]

    def renew(self, leases: dict[str, list[str]]) -> None:
        expiry = time.time() + LEASE_SEC
        with self.lock:
            for lease, keys in leases.items():
                for key in keys:
                    if lease in self.sets.get(key, {}):
                        self.sets[key][lease] = expiry

    def drop(self, lease: str, keys: list[str]) -> None:
        with self.lock:
            for key in keys:
                self.sets.get(key, {}).pop(lease, None)


class _reachable:
    """Redis errors as a 503 the caller can read."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if isinstance(exc, redis.RedisError):
            log.warning("capacity counters unreachable: %s", exc)
            raise Unavailable("The server cannot count what is in use right now; retry "
                              "shortly.") from None
        return False


_STORES: dict[tuple[str, str], RedisStore | MemoryStore] = {}
_LOCK = threading.Lock()


class ThreadSlots:
    """Server threads this process gives to long-lived connections (event streams, web
    terminals), by kind: each kind within its own limit, and every kind together within
    the process's total (SKILL_STREAMS_MAX), so they can never take every thread. A
    thread is this process's, so this count is per process; members' and workspaces'
    shares of the same connections are the leases above, counted across processes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def take(self, kind: str, limit: int, total: int, refusal: str) -> None:
        """One more of `kind`, or 503 `refusal` past `limit` of it or `total` in all."""
        with self._lock:
            mine = self._open.get(kind, 0)
            if mine >= limit or sum(self._open.values()) >= total:
                raise Unavailable(refusal)
            self._open[kind] = mine + 1

    def release(self, kind: str) -> None:
        with self._lock:
            self._open[kind] -= 1

    def open(self, kind: str) -> int:
        with self._lock:
            return self._open.get(kind, 0)


def thread_slots(app: Flask | None = None) -> ThreadSlots:
    """This app's one ThreadSlots in this process."""
    return (app or current_app).extensions.setdefault("sandlot_thread_slots", ThreadSlots())


def _store() -> RedisStore | MemoryStore:
    config = current_app.config
    url = config.get("REDIS_URL") or ""
    namespace = f"{PREFIX}{deployment_id(config)}:"
    with _LOCK:
        if (url, namespace) not in _STORES:
            _STORES[url, namespace] = RedisStore(url, namespace) if url else MemoryStore()
        return _STORES[url, namespace]


def forget_all() -> None:
    """Drop every counter of this deployment (tests, between two of them)."""
    store = _store()
    if isinstance(store, MemoryStore):
        with store.lock:
            store.sets.clear()
        return
    keys = list(store.client.scan_iter(match=store.prefix + "*", count=500))
    if keys:
        store.client.delete(*keys)


class Renewer:
    """What this process holds, renewed together by one thread (started with the first
    item) every `interval()` seconds: `renew` gets every item at once, in an app context.
    Capacity leases here (key: lease id, value: its counters); the heartbeats of this
    process's command runs in app.services.sessions.runs."""

    def __init__(self, app: Flask, name: str, interval: Callable[[], float],
                 renew: Callable[[dict[str, Any]], None]) -> None:
        self.app, self.name, self.interval, self.renew = app, name, interval, renew
        self.items: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, key: str, value: Any = None) -> None:
        with self.lock:
            self.items[key] = value
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self.thread.start()

    def discard(self, key: str) -> Any:
        with self.lock:
            return self.items.pop(key, None)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval())
            with self.lock:
                items = dict(self.items)
            if not items:
                continue
            try:
                with self.app.app_context():
                    self.renew(items)
            except Exception:  # noqa: BLE001 - Redis or the database is away: next time
                log.warning("%s: could not renew %d items", self.name, len(items),
                            exc_info=True)


def _renewer(app: Flask) -> Renewer:
    with _LOCK:
        if "capacity_renewer" not in app.extensions:
            app.extensions["capacity_renewer"] = Renewer(
                app, "capacity-renew", lambda: RENEW_SEC, lambda leases: _store().renew(leases))
        return app.extensions["capacity_renewer"]
