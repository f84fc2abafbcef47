"""Dispatchers: hand a committed job id to RQ (with REDIS_URL) or to worker threads."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from flask import Flask

from app.extensions import db
from app.models import JobStatus
from app.services import jobs as job_service

log = logging.getLogger("sandlot.jobs")
QUEUE_NAME = "sandlot"
RUNNER = "app.jobs.runner.run_job"


def mark_errored(job, connection, exc_type=None, exc_value=None, tb=None) -> None:
    """RQ failure callback: the run crashed or was killed; make the row say so."""
    from app.jobs.runner import run_in_app

    reason = exc_type.__name__ if exc_type else "worker failure"
    run_in_app(lambda: job_service.finish(job.id, JobStatus.errored, error=f"Job {reason}."))


class RQDispatcher:
    """Enqueue on Redis; `flask worker` runs the jobs."""

    def __init__(self, app: Flask):
        self.url = app.config["REDIS_URL"]
        self.failure_ttl = app.config["JOB_FAILURE_TTL"]
        self._queue = None

    @property
    def queue(self):
        if self._queue is None:
            from redis import Redis
            from rq import Queue

            self._queue = Queue(QUEUE_NAME, connection=Redis.from_url(self.url))
        return self._queue

    def submit(self, job_id: str, timeout: int) -> None:
        from rq import Callback

        self.queue.enqueue_call(
            RUNNER, args=(job_id,), job_id=job_id, timeout=timeout,
            failure_ttl=self.failure_ttl, result_ttl=3600,
            on_failure=Callback(mark_errored, timeout=30),
        )


class InProcessDispatcher:
    """Embedded mode: the same runner on a small pool of threads, plus a reaper thread."""

    def __init__(self, app: Flask):
        self.app = app
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, job_id: str, timeout: int) -> None:
        self._ensure_started().submit(self._run, job_id)

    def _run(self, job_id: str) -> None:
        from app.jobs.runner import run_job

        with self.app.app_context():
            try:
                run_job(job_id)
            except Exception:
                log.exception("in-process job %s crashed", job_id)

    def _ensure_started(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                workers = self.app.config["INPROCESS_WORKERS"]
                self._pool = ThreadPoolExecutor(workers, thread_name_prefix="sandlot-job")
                start_reaper(self.app)
            return self._pool

    def shutdown(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


def start_reaper(app: Flask, interval: float = 30.0) -> threading.Thread:
    """A daemon thread that fails silent rows every `interval` seconds."""

    def loop() -> None:
        stop = threading.Event()
        while not stop.wait(interval):
            with app.app_context():
                try:
                    job_service.reap(reaper_grace(app))
                except Exception:
                    log.warning("job reaper pass failed", exc_info=True)
                finally:
                    db.session.remove()

    thread = threading.Thread(target=loop, name="sandlot-reaper", daemon=True)
    thread.start()
    return thread


def reaper_grace(app: Flask) -> int:
    return app.config["JOB_HEARTBEAT_SECONDS"] * 3 + app.config["JOB_REAP_GRACE_SECONDS"]


def make_dispatcher(app: Flask):
    return RQDispatcher(app) if app.config.get("REDIS_URL") else InProcessDispatcher(app)
