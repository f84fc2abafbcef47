"""The fair share on RQ: a Redis-backed count of each tenant's admitted jobs.

Decision (decisions 12, issue 11 item 5): RQ's queue is first in, first out, so a tenant
that enqueues two jobs that hang would hold both of two workers. A job is therefore only
put on the RQ queue when its tenant holds fewer than `share` admitted jobs (queued or
running); otherwise its id waits in the tenant's own list in Redis. When an admitted job
ends (queue.run_rq_job, the worker's wrapper, whatever the outcome) its slot is released
and the tenant's next waiting job is admitted. Both steps are Lua scripts, so concurrent
web processes and workers never admit past the share.

A worker killed outright never reaches that release. The reaper, which fails the job's row
once its heartbeat is silent (app/services/jobs.py `reap`), frees the slot in the same
pass (RQDispatcher.reaped), so the tenant's next waiting job is admitted within the
reaper's grace and interval of the kill (under two minutes by default); RQ's failure
callback frees it too when RQ's own cleanup finds the job abandoned (queue.mark_errored).
Releasing twice is harmless: the ZREM of a slot no longer held does nothing, and a waiting
job is admitted only into a free slot, popped once from its list, so it is never enqueued
twice. A slot is a sorted-set entry scored with when it expires (the job's limit plus a
grace): should both releases fail (Redis away), the slot frees itself at the job's limit
and the reaper's pass (`promote_all`) admits what waits. The share itself counts only
workers whose heartbeat is live (RQDispatcher.live_workers).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

log = logging.getLogger("sandlot.jobs")
GRACE_SEC = 60  # queue wait and the failure callback, beyond the job's own limit
KEY_TTL_SEC = 7 * 24 * 3600

ADMIT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
if redis.call('LLEN', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[7])
  return 1
end
redis.call('RPUSH', KEYS[2], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[7])
redis.call('SADD', KEYS[3], ARGV[6])
return 0
"""

RELEASE = """
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
local now = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local out = {}
while redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) do
  local item = redis.call('LPOP', KEYS[2])
  if not item then break end
  local doc = cjson.decode(item)
  redis.call('ZADD', KEYS[1], now + tonumber(doc.timeout) + tonumber(ARGV[5]), doc.id)
  table.insert(out, item)
end
if redis.call('LLEN', KEYS[2]) == 0 then redis.call('SREM', KEYS[3], ARGV[4]) end
return out
"""

Enqueue = Callable[[str, int, int], None]  # (job id, timeout, tenant id): onto the RQ queue


class FairShare:
    """Admission to one RQ queue, `share(connection)` jobs per tenant at a time."""

    def __init__(self, connection, queue: str, share: Callable[[], int]):
        self.connection, self.queue, self.share = connection, queue, share
        self._admit = connection.register_script(ADMIT)
        self._release = connection.register_script(RELEASE)

    def _keys(self, tenant_id: int) -> list[str]:
        base = f"sandlot:fair:{self.queue}"
        return [f"{base}:running:{tenant_id}", f"{base}:waiting:{tenant_id}", f"{base}:tenants"]

    def admit(self, job_id: str, timeout: int, tenant_id: int) -> bool:
        """True: enqueue it now (its slot is held); False: it waits for its tenant's slot."""
        now = time.time()
        payload = json.dumps({"id": job_id, "timeout": int(timeout)})
        return bool(self._admit(keys=self._keys(tenant_id), args=[
            job_id, now + timeout + GRACE_SEC, now, self.share(), payload, tenant_id,
            KEY_TTL_SEC]))

    def started(self, job_id: str, timeout: int, tenant_id: int) -> None:
        """Count the slot's expiry from the start of the run, not from admission."""
        key = self._keys(tenant_id)[0]
        self.connection.zadd(key, {job_id: time.time() + timeout + GRACE_SEC}, xx=True)

    def release(self, job_id: str, tenant_id: int, enqueue: Enqueue) -> None:
        """Free the job's slot and put the tenant's next waiting jobs on the queue."""
        promoted = self._release(keys=self._keys(tenant_id), args=[
            job_id, time.time(), self.share(), tenant_id, GRACE_SEC])
        for item in promoted or ():
            doc = json.loads(item)
            try:
                enqueue(doc["id"], int(doc["timeout"]), tenant_id)
            except Exception:  # its row stays pending: the job reaper ends it
                log.warning("could not enqueue job %s after its tenant's slot freed",
                            doc["id"], exc_info=True)
                self.connection.zrem(self._keys(tenant_id)[0], doc["id"])

    def promote_all(self, enqueue: Enqueue) -> None:
        """Reaper pass: admit waiting jobs whose tenant's slots expired (a lost worker)."""
        for raw in self.connection.smembers(self._keys(0)[2]):
            self.release("", int(raw), enqueue)
