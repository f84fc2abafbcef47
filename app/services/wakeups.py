"""Wake-ups for install streams: "skill X has a new event" (reference 7.3).

The event rows are the truth (decisions 8); a notice only tells a waiting stream to read
them now instead of at its next poll. With REDIS_URL a notice is a Redis publish, so a
worker in any process wakes every stream in every web process; one listener thread per
process (not one connection per stream) fans the notices out. Without Redis the jobs run
in this process, so a notice is a local hand-off, and streams also poll the database.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from flask import current_app

log = logging.getLogger("sandlot.skills.stream")

CHANNEL = "sandlot:install-events:"
_lock = threading.Lock()
_waiters: dict[str, set[queue.SimpleQueue]] = {}
_listeners: dict[str, threading.Thread] = {}
_clients: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    with _lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        return _clients[url]


def _wake(skill_id: str) -> None:
    with _lock:
        waiters = list(_waiters.get(skill_id, ()))
    for waiter in waiters:
        waiter.put(None)


def publish(skill_id: str) -> None:
    """Tell every stream following `skill_id` that it has a new event (best effort: a lost
    notice only delays a stream until its next poll)."""
    url = current_app.config.get("REDIS_URL")
    if not url:
        _wake(skill_id)
        return
    try:
        _client(url).publish(CHANNEL + skill_id, b"1")
    except redis.RedisError:
        log.warning("install event notice for %s was not published", skill_id)


def _listen(url: str) -> None:
    """The one subscriber of this process; reconnects after a Redis outage."""
    while True:
        try:
            pubsub = redis.Redis.from_url(url, socket_connect_timeout=2).pubsub(
                ignore_subscribe_messages=True)
            pubsub.psubscribe(CHANNEL + "*")
            for message in pubsub.listen():
                channel = message.get("channel") or b""
                _wake(channel.decode()[len(CHANNEL):])
        except Exception:  # the streams keep polling the rows meanwhile
            log.warning("install event listener lost Redis; retrying", exc_info=True)
            threading.Event().wait(1.0)


def _ensure_listener(url: str) -> None:
    with _lock:
        thread = _listeners.get(url)
        if thread is not None and thread.is_alive():
            return
        thread = threading.Thread(target=_listen, args=(url,), name="install-event-listener",
                                  daemon=True)
        _listeners[url] = thread
        thread.start()


def listener_ready(url: str) -> bool:
    """Whether some process's subscriber is connected (tests wait for it before timing)."""
    try:
        return int(_client(url).pubsub_numpat()) > 0
    except redis.RedisError:
        return False


@contextmanager
def subscription(skill_id: str) -> Iterator[queue.SimpleQueue]:
    """A queue that receives a wake-up per new event of `skill_id`, registered before the
    caller reads the last record so that nothing written in between is missed."""
    url = current_app.config.get("REDIS_URL")
    if url:
        _ensure_listener(url)
    waiter: queue.SimpleQueue = queue.SimpleQueue()
    with _lock:
        _waiters.setdefault(skill_id, set()).add(waiter)
    try:
        yield waiter
    finally:
        with _lock:
            waiters = _waiters.get(skill_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del _waiters[skill_id]
