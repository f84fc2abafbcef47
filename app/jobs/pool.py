"""The in-process worker pool: N slots shared fairly between tenants, a time limit per job.

Decision (decisions 12, issue 11 item 5): a tenant holds at most `share` slots at once;
its further jobs wait, in order, while other tenants' jobs take the free slots. Each run
has a deadline `limit` seconds after it starts. At the deadline the supervisor frees the
slot and calls `overrun` (the dispatcher marks the row failed). The run's thread cannot
be killed (Python has no way to stop a thread), so it is left to end on its own: every
job kind bounds its blocking calls below its limit (app/services/job_limits.py), and
whatever it writes after that is refused by the row, which keeps its first outcome.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

log = logging.getLogger("sandlot.jobs")
IDLE_WAKE_SEC = 60.0


@dataclass
class Ticket:
    """One submitted job: waiting, then holding a slot until it ends or overruns."""

    job_id: str
    tenant_id: int | None
    limit: float
    future: Future = field(default_factory=Future)
    deadline: float = 0.0


class FairPool:
    """Threads started per job, at most `workers` holding slots, `share` per tenant."""

    def __init__(self, workers: int, share: int, run: Callable[[str], None],
                 overrun: Callable[[str, float], None]):
        self.workers, self.share = max(1, workers), max(1, share)
        self._run, self._overrun = run, overrun
        self._cond = threading.Condition()
        self._waiting: list[Ticket] = []
        self._running: dict[str, Ticket] = {}
        self._stopping = False
        self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                            name="sandlot-job-supervisor")
        self._supervisor.start()

    def submit(self, job_id: str, tenant_id: int | None, limit: float) -> Future:
        ticket = Ticket(job_id, tenant_id, float(limit))
        with self._cond:
            if self._stopping:
                raise RuntimeError("the job pool is shutting down")
            self._waiting.append(ticket)
            self._cond.notify_all()
        return ticket.future

    def shutdown(self) -> None:
        """Run what was submitted, then stop the supervisor (it leaves once idle)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._supervisor.join()

    # -- the supervisor: start eligible jobs, free the slots of overrunning ones ----------

    def _supervise(self) -> None:
        while True:
            with self._cond:
                overdue = self._take_overdue()
                self._start_eligible()
                if self._stopping and not self._waiting and not self._running:
                    return
                if not overdue:
                    self._cond.wait(self._next_wake())
            for ticket in overdue:
                log.warning("job %s passed its %.0f s limit; its slot is freed and its thread "
                            "left to end on its own timeouts", ticket.job_id, ticket.limit)
                try:
                    self._overrun(ticket.job_id, ticket.limit)
                except Exception:  # the reaper fails the row later; the pool must go on
                    log.warning("could not mark job %s failed", ticket.job_id, exc_info=True)

    def _take_overdue(self) -> list[Ticket]:
        now = time.monotonic()
        overdue = [t for t in self._running.values() if t.deadline <= now]
        for ticket in overdue:
            del self._running[ticket.job_id]
        return overdue

    def _start_eligible(self) -> None:
        held = Counter(t.tenant_id for t in self._running.values())
        for ticket in list(self._waiting):
            if len(self._running) >= self.workers:
                return
            if ticket.tenant_id is not None and held[ticket.tenant_id] >= self.share:
                continue  # this tenant is at its share: its job waits, others may pass
            self._waiting.remove(ticket)
            held[ticket.tenant_id] += 1
            ticket.deadline = time.monotonic() + ticket.limit
            self._running[ticket.job_id] = ticket
            threading.Thread(target=self._body, args=(ticket,), daemon=True,
                             name=f"sandlot-job-{ticket.job_id[:8]}").start()

    def _next_wake(self) -> float:
        now = time.monotonic()
        soonest = min((t.deadline for t in self._running.values()), default=now + IDLE_WAKE_SEC)
        return max(0.01, soonest - now)

    def _body(self, ticket: Ticket) -> None:
        try:
            self._run(ticket.job_id)
        finally:
            with self._cond:
                if self._running.get(ticket.job_id) is ticket:
                    del self._running[ticket.job_id]
                self._cond.notify_all()
            ticket.future.set_result(None)
