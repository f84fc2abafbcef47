"""The Redis keys the nodes of one deployment and their callers share.

- `live:<engine>`: a sorted set of the nodes serving an engine, scored by the time
  their heartbeat runs out (HEARTBEAT_SEC apart, good for LIVE_SEC).
- `node:<id>`: what a node says of itself (host, pid, whether it enforces egress).
- `draining:<id>`: a stopping node, out of the live sets (it takes no new call), still
  heart-beating while the calls it took run to their end.
- `calls:<engine>`: the calls waiting for any node of that engine.
- `reply:<call>`: what the node answers to one call, event by event.
- `tin:<terminal>`, `tout:<terminal>`, `talive:<terminal>`: a terminal's keystrokes,
  its output and the caller's sign of life.

Every message is sealed with the deployment's SECRETS_KEYS (Fernet: encrypted and
authenticated): a reader of Redis sees neither members' credentials nor their files, and
a writer without the keys cannot make a node run anything. A node takes no call sealed
more than CALL_MAX_AGE_SEC ago (a replayed one).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from app.backends.remote import codec

PREFIX = "sandlot:node:"
HEARTBEAT_SEC = 5.0
LIVE_SEC = 15.0
REPLY_TTL_SEC = 300  # a reply list nobody reads any more goes away
CALL_MAX_AGE_SEC = 120


class Link:
    """One deployment's node keys, over a client whose reads may block for WAIT_SEC."""

    WAIT_SEC = 2.0

    def __init__(self, client: redis.Redis, deployment: str, keys: list[str]):
        self.client = client
        self.prefix = f"{PREFIX}{deployment}:"
        self._fernet = MultiFernet([Fernet(key.encode()) for key in keys])

    def pack(self, message: dict[str, Any]) -> bytes:
        return self._fernet.encrypt(codec.dumps(message))

    def unpack(self, raw: bytes, max_age: int | None = None) -> dict[str, Any]:
        """A message sealed with the deployment's keys (within `max_age` seconds)."""
        try:
            return codec.loads(self._fernet.decrypt(raw, ttl=max_age))
        except InvalidToken:
            raise codec.WireError("a message not sealed with this deployment's keys, or "
                                  "sealed too long ago") from None

    def key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    # -- liveness ---------------------------------------------------------------------

    def beat(self, node_id: str, engines: list[str], info: dict[str, Any]) -> None:
        """A node's heartbeat: live for LIVE_SEC more on each of `engines`."""
        until = time.time() + LIVE_SEC
        with self.client.pipeline(transaction=False) as pipe:
            for engine in engines:
                pipe.zadd(self.key("live", engine), {node_id: until})
                pipe.zremrangebyscore(self.key("live", engine), "-inf", time.time())
            pipe.set(self.key("node", node_id), json.dumps(info), ex=int(LIVE_SEC) + 5)
            pipe.execute()

    def withdraw(self, node_id: str, engines: list[str]) -> None:
        """A stopping node: out of the live sets, so no new call comes to it, and
        draining, so the callers of the calls it took still see it alive."""
        with self.client.pipeline(transaction=True) as pipe:
            for engine in engines:
                pipe.zrem(self.key("live", engine), node_id)
            pipe.set(self.key("draining", node_id), b"1", px=int(LIVE_SEC * 1000))
            pipe.execute()

    def drain_beat(self, node_id: str) -> None:
        """A draining node's heartbeat: alive for LIVE_SEC more to its callers."""
        self.client.set(self.key("draining", node_id), b"1", px=int(LIVE_SEC * 1000))

    def leave(self, node_id: str, engines: list[str]) -> None:
        with self.client.pipeline(transaction=False) as pipe:
            for engine in engines:
                pipe.zrem(self.key("live", engine), node_id)
            pipe.delete(self.key("node", node_id), self.key("draining", node_id))
            pipe.execute()

    def live_nodes(self, engine: str) -> list[dict[str, Any]]:
        """The live nodes of `engine`, each as it describes itself (with its `id`)."""
        ids = [raw.decode() for raw in self.client.zrangebyscore(
            self.key("live", engine), time.time(), "+inf")]
        if not ids:
            return []
        nodes = []
        for node_id, raw in zip(ids, self.client.mget([self.key("node", i) for i in ids]),
                                strict=True):
            if raw:
                nodes.append({**json.loads(raw), "id": node_id})
        return nodes

    def alive(self, node_id: str, engine: str) -> bool:
        """Is the node that took a call still there: live, or draining its calls?"""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zscore(self.key("live", engine), node_id)
            pipe.exists(self.key("draining", node_id))
            score, draining = pipe.execute()
        return bool(draining) or (score is not None and score > time.time())
