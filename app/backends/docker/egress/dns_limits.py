"""Each sandbox's share of the DNS resolver (issue 11 item 3).

One resolver serves every sandbox, so without bounds one sandbox could hold all of it:
forty idle TCP connections once held every worker and stalled everyone's lookups for
10 s. Per sandbox, the resolver now keeps:

- at most TCP_PER_SANDBOX open TCP connections (more are closed at accept), each idle
  for at most TCP_IDLE_SEC and open for at most TCP_LIFETIME_SEC;
- at most INFLIGHT_PER_SANDBOX queries being answered at once (the rest are dropped,
  as a busy server does; clients retry), so its work in the shared pool is bounded and
  the pool's queue is at most sandboxes x INFLIGHT_PER_SANDBOX long;
- a token bucket of RATE_PER_SEC queries a second (burst RATE_BURST), so it cannot
  flood the upstream on everyone's behalf.
"""

from __future__ import annotations

import threading
import time

TCP_PER_SANDBOX = 4
TCP_IDLE_SEC = 3.0
TCP_LIFETIME_SEC = 10.0
INFLIGHT_PER_SANDBOX = 8
RATE_PER_SEC = 100.0
RATE_BURST = 200.0


class Share:
    """One sandbox's counters; thread safe (the loop admits, workers release)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tcp_open = 0
        self.inflight = 0
        self._tokens = RATE_BURST
        self._refilled = time.monotonic()
        self.refused = 0  # queries or connections turned away, for the log

    def _take_token(self) -> bool:
        now = time.monotonic()
        self._tokens = min(RATE_BURST, self._tokens + (now - self._refilled) * RATE_PER_SEC)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def admit_query(self) -> bool:
        """May one more query be answered now? (Call `done_query` when it is.)"""
        with self._lock:
            if self.inflight >= INFLIGHT_PER_SANDBOX or not self._take_token():
                self.refused += 1
                return False
            self.inflight += 1
            return True

    def done_query(self) -> None:
        with self._lock:
            self.inflight -= 1

    def admit_connection(self) -> bool:
        """May one more TCP connection stay open? (Call `closed` when it goes.)"""
        with self._lock:
            if self.tcp_open >= TCP_PER_SANDBOX:
                self.refused += 1
                return False
            self.tcp_open += 1
            return True

    def closed(self) -> None:
        with self._lock:
            self.tcp_open -= 1
