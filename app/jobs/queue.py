"""Dispatchers: hand a committed job id to RQ (with REDIS_URL) or to worker threads."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, wait
from datetime import UTC, datetime, timedelta

from flask import Flask, current_app

from app.extensions import db
from app.jobs.fair_rq import FairShare
from app.jobs.pool import FairPool
from app.models import Job, JobStatus
from app.services import job_limits
from app.services import jobs as job_service
from app.services.sandboxes import egress_daemons, egress_log, host_sweep, pools
from app.services.sandboxes import image as skill_image
from app.services.sessions import binding, ending, runs
from app.services.skills.installs import control as skill_runs

log = logging.getLogger("sandlot.jobs")
QUEUE_NAME = "sandlot"
RUNNER = "app.jobs.queue.run_rq_job"
# A web request enqueues; it must not hang on a Redis that accepts but does not answer.
ENQUEUE_SOCKET_TIMEOUT = 5
# A worker is live while its last heartbeat is at most this many of its beats old
# (JOB_HEARTBEAT_SECONDS, sent by app/jobs/worker.py whether the worker is busy or idle).
LIVE_BEATS = 3


def queue_name(app: Flask) -> str:
    """JOB_QUEUE lets several deployments (or test runs) share one Redis without cross-talk."""
    return app.config.get("JOB_QUEUE") or QUEUE_NAME


def died_reason(exc_type: type[BaseException] | None, timeout_sec: int | None) -> str:
    """The row's error when a run died outside the kind's own error handling."""
    from rq.exceptions import AbandonedJobError
    from rq.timeouts import BaseTimeoutException

    if exc_type is not None and issubclass(exc_type, BaseTimeoutException):
        return f"Job ran past its timeout ({timeout_sec} s) and was stopped."
    if exc_type is not None and issubclass(exc_type, AbandonedJobError):
        return "The worker running this job was lost."
    name = exc_type.__name__ if exc_type is not None else "worker failure"
    return f"Job crashed ({name}); see the worker log."


def mark_errored(job, connection, exc_type=None, exc_value=None, tb=None) -> None:
    """RQ failure callback: the run crashed (errored) or was stopped at its kind's time
    limit (failed, saying so); either way the row says what happened. It also frees the
    job's fair-share slot: when RQ's cleanup finds a job whose worker died, the worker
    never reached run_rq_job's release (the reaper usually freed it long before; a second
    release changes nothing)."""
    from rq.timeouts import BaseTimeoutException

    from app.jobs.runner import run_in_app

    def record() -> None:
        try:
            if exc_type is not None and issubclass(exc_type, BaseTimeoutException):
                row = db.session.get(Job, job.id)
                job_service.finish(job.id, JobStatus.failed, error=job_limits.overrun_reason(
                    row.kind if row is not None else "", job.timeout))
            else:
                job_service.finish(job.id, JobStatus.errored,
                                   error=died_reason(exc_type, job.timeout))
        finally:
            db.session.remove()
            release_slot(job.id, (job.meta or {}).get("tenant_id"))

    run_in_app(record)


def release_slot(job_id: str, tenant_id: int | None) -> None:
    """Free the job's fair-share slot on the RQ dispatcher and admit its tenant's next
    waiting job; on failure the slot still expires at its score (the reaper promotes)."""
    dispatcher = current_app.extensions["sandlot_dispatcher"]
    fair = getattr(dispatcher, "fair", None) if tenant_id is not None else None
    if fair is None:
        return
    try:
        fair.release(job_id, tenant_id, dispatcher.enqueue_now)
    except Exception:
        log.warning("could not release job %s's fair-share slot", job_id, exc_info=True)


def run_rq_job(job_id: str) -> str:
    """What an RQ worker runs: the runner, holding its tenant's fair-share slot for the
    run and handing it to the tenant's next waiting job at the end, whatever the outcome
    (RQ's timeout included: it is an exception raised in here)."""
    from rq import get_current_job

    from app.jobs.runner import run_job

    current = get_current_job()
    tenant_id = (current.meta or {}).get("tenant_id") if current is not None else None
    fair = getattr(current_app.extensions["sandlot_dispatcher"], "fair", None)
    if fair is not None and tenant_id is not None:
        fair.started(job_id, current.timeout, tenant_id)
    try:
        return run_job(job_id)
    finally:
        release_slot(job_id, tenant_id)


class RQDispatcher:
    """Enqueue on Redis, a fair share per tenant (app/jobs/fair_rq.py); `flask worker`
    runs the jobs."""

    def __init__(self, app: Flask):
        self.url = app.config["REDIS_URL"]
        self.name = queue_name(app)
        self.failure_ttl = app.config["JOB_FAILURE_TTL"]
        self.configured_share = app.config.get("JOB_TENANT_SHARE")
        self.live_window = LIVE_BEATS * app.config["JOB_HEARTBEAT_SECONDS"]
        self._queue = None
        self._fair: FairShare | None = None

    @property
    def queue(self):
        if self._queue is None:
            from redis import Redis
            from rq import Queue

            connection = Redis.from_url(self.url, socket_connect_timeout=ENQUEUE_SOCKET_TIMEOUT,
                                        socket_timeout=ENQUEUE_SOCKET_TIMEOUT)
            self._queue = Queue(self.name, connection=connection)
        return self._queue

    @property
    def fair(self) -> FairShare:
        if self._fair is None:
            self._fair = FairShare(self.queue.connection, self.name, self.share)
        return self._fair

    def share(self) -> int:
        """JOB_TENANT_SHARE, else one less than the live workers on this queue (at least 1)."""
        if self.configured_share:
            return job_limits.tenant_share(0, self.configured_share)
        return job_limits.tenant_share(self.live_workers(), None)

    def live_workers(self) -> int:
        """The workers on this queue whose heartbeat is recent. A worker killed outright
        stays registered until its key expires (RQ's worker_ttl, or its running job's
        limit plus a minute), but its heartbeat stops at once."""
        from rq import worker_registration
        from rq.utils import utcparse

        keys = worker_registration.get_keys(queue=self.queue)
        if not keys:
            return 0
        with self.queue.connection.pipeline(transaction=False) as pipeline:
            for key in keys:
                pipeline.hget(key, "last_heartbeat")
            beats = pipeline.execute()
        since = datetime.now(UTC) - timedelta(seconds=self.live_window)
        return sum(1 for beat in beats if beat and utcparse(beat.decode()) >= since)

    def submit(self, job_id: str, timeout: int, tenant_id: int | None = None) -> None:
        if tenant_id is not None and not self.fair.admit(job_id, timeout, tenant_id):
            return  # it waits for its tenant's slot; run_rq_job's release enqueues it
        try:
            self.enqueue_now(job_id, timeout, tenant_id)
        except Exception:
            if tenant_id is not None:  # do not hold a slot for a job that is not queued
                self.fair.release(job_id, tenant_id, self.enqueue_now)
            raise

    def enqueue_now(self, job_id: str, timeout: int, tenant_id: int | None) -> None:
        from rq import Callback

        self.queue.enqueue_call(
            RUNNER, args=(job_id,), job_id=job_id, timeout=timeout,
            failure_ttl=self.failure_ttl, result_ttl=3600, meta={"tenant_id": tenant_id},
            on_failure=Callback(mark_errored, timeout=30),
        )

    def reaped(self, job_id: str, tenant_id: int | None) -> None:
        """The reaper ended the job's row (its worker went silent, or it ran past its limit):
        free its slot now and admit its tenant's next waiting job, rather than when the
        slot's score expires, the job's limit plus a grace after it started."""
        if tenant_id is not None:
            self.fair.release(job_id, tenant_id, self.enqueue_now)

    def housekeeping(self) -> None:
        """Reaper pass: admit jobs whose tenant's slot expired with a lost worker."""
        self.fair.promote_all(self.enqueue_now)


class InProcessDispatcher:
    """Embedded mode: the same runner on a fair pool of threads (app/jobs/pool.py: a share
    per tenant, a time limit per job), plus a reaper thread."""

    def __init__(self, app: Flask):
        self.app = app
        self._pool: FairPool | None = None
        self._reaper_stop: threading.Event | None = None
        self._lock = threading.Lock()
        self._in_flight: dict[str, Future] = {}

    def submit(self, job_id: str, timeout: int, tenant_id: int | None = None) -> None:
        future = self._ensure_started().submit(job_id, tenant_id, timeout)
        with self._lock:
            self._in_flight[job_id] = future
        future.add_done_callback(lambda _: self._forget(job_id, future))

    def _forget(self, job_id: str, future: Future) -> None:
        with self._lock:
            if self._in_flight.get(job_id) is future:
                del self._in_flight[job_id]

    def drain(self, timeout: float) -> list[str]:
        """Wait up to `timeout` seconds for every submitted job to end (a run past its limit
        included: its thread may still write); return the ids of those still queued or
        running (empty when the pool is idle)."""
        with self._lock:
            pending = dict(self._in_flight)
        if pending:
            wait(pending.values(), timeout=timeout)
        return [job_id for job_id, future in pending.items() if not future.done()]

    def _run(self, job_id: str) -> None:
        from app.jobs.runner import run_job

        with self.app.app_context():
            try:
                run_job(job_id)
            except BaseException as exc:  # the pool thread survives; the row must end
                log.exception("in-process job %s crashed", job_id)
                self._mark_died(job_id, type(exc))

    def _mark_died(self, job_id: str, exc_type: type[BaseException]) -> None:
        """The in-process twin of RQ's failure callback."""
        try:
            job = db.session.get(Job, job_id)
            job_service.finish(job_id, JobStatus.errored,
                               error=died_reason(exc_type, job.timeout_sec if job else None))
        except Exception:
            log.warning("could not mark job %s errored; the reaper will", job_id, exc_info=True)
        finally:
            db.session.remove()

    def _overrun(self, job_id: str, limit: float) -> None:
        """The pool freed the slot of a run past its limit: the row ends failed, saying so."""
        with self.app.app_context():
            try:
                job = db.session.get(Job, job_id)
                kind = job.kind if job is not None else ""
                job_service.finish(job_id, JobStatus.failed,
                                   error=job_limits.overrun_reason(kind, int(limit)))
            finally:
                db.session.remove()

    def reaped(self, job_id: str, tenant_id: int | None) -> None:
        """Nothing to free: a run's pool slot lives and dies with this process. The reaper
        of another process ends the rows of a dead one, whose pool went with it; a silent
        run of this process still has its thread (a thread cannot be killed), so it keeps
        its slot until it returns or its deadline frees it (FairPool)."""

    def ensure_housekeeping(self) -> None:
        """Start this process's job threads and reaper now rather than with its first job:
        a warm pool needs its keeper as soon as a session of its config opens."""
        self._ensure_started()

    def _ensure_started(self) -> FairPool:
        with self._lock:
            if self._pool is None:
                workers = self.app.config["INPROCESS_WORKERS"]
                share = job_limits.tenant_share(workers, self.app.config.get("JOB_TENANT_SHARE"))
                self._pool = FairPool(workers, share, self._run, self._overrun)
                interval = self.app.config["INPROCESS_REAPER_SECONDS"]
                if interval:
                    self._reaper_stop = threading.Event()
                    start_reaper(self.app, interval=interval, stop=self._reaper_stop)
            return self._pool

    def shutdown(self) -> None:
        """Wait for running jobs and stop the reaper (tests, and a clean process exit)."""
        with self._lock:  # released before waiting: finishing jobs take it to forget themselves
            pool, self._pool = self._pool, None
            stop, self._reaper_stop = self._reaper_stop, None
        if stop is not None:
            stop.set()
        if pool is not None:
            pool.shutdown()
            self.drain(timeout=600)  # runs past their limit end on their own timeouts


def start_reaper(app: Flask, interval: float = 30.0,
                 stop: threading.Event | None = None) -> threading.Thread:
    """A daemon thread that, every `interval` seconds until `stop` is set, fails silent job
    rows (on RQ freeing their fair-share slots), ends skill installs whose run died
    (and frees their image lock), marks command runs whose process stopped refreshing
    them `lost`, pauses Docker sandboxes idle past their TTL (E2B and Cube pause
    themselves), retries the removal of ended sessions' sandboxes whose provider was
    unreachable, releases superseded skill snapshots past their retention, moves the
    egress log's new lines into the database (sweeping rows past their retention), and
    starts the sandboxes' egress resolver or gateway again if either stopped while
    sandboxes need it. Beside it, the warm pools' keeper (every 2 s)."""
    stop = stop or threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            dispatcher = app.extensions["sandlot_dispatcher"]
            housekeeping = getattr(dispatcher, "housekeeping", lambda: None)
            for name, task in (("job reaper", lambda: job_service.reap(reaper_grace(app))),
                               ("fair share promotion", housekeeping),
                               ("skill run reaper", skill_runs.reap),
                               ("lost command runs", runs.reap_lost),
                               ("lost runs' commands", runs.end_lost),
                               ("idle pause", binding.pause_idle),
                               ("sandbox removal sweep", ending.sweep),
                               ("expired snapshot sweep", skill_image.sweep_expired),
                               ("egress log", egress_log.housekeeping),
                               ("egress daemons", egress_daemons.supervise),
                               ("host leftovers", host_sweep.sweep)):
                with app.app_context():
                    try:
                        task()
                    except Exception:
                        log.warning("%s pass failed", name, exc_info=True)
                    finally:
                        db.session.remove()

    thread = threading.Thread(target=loop, name="sandlot-reaper", daemon=True)
    thread.start()
    pools.start_keeper(app, stop)  # warm pools of this process's engines, on their own timer
    return thread


def reaper_grace(app: Flask) -> int:
    return app.config["JOB_HEARTBEAT_SECONDS"] * 3 + app.config["JOB_REAP_GRACE_SECONDS"]


def make_dispatcher(app: Flask):
    return RQDispatcher(app) if app.config.get("REDIS_URL") else InProcessDispatcher(app)
