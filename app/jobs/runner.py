"""Run one job row to completion: claim, heartbeat, call its kind, record the outcome.

`run_job` is what RQ imports and what the in-process worker calls. It takes only the
id, is safe to call twice (a second call finds the row claimed and returns), and
leaves the row terminal when the kind returns or raises an Exception. What escapes it
(RQ's timeout, SystemExit, ...) reaches the dispatcher, whose failure path marks the row;
a process that dies outright goes silent and the reaper ends its row.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager

from flask import Flask, current_app, has_app_context
from rq.timeouts import BaseTimeoutException

from app.extensions import db
from app.jobs import kinds  # noqa: F401  (registers the job kinds)
from app.jobs.registry import KINDS, JobFailed
from app.models import Job, JobStatus
from app.services import jobs as job_service

log = logging.getLogger("sandlot.jobs")


class JobContext:
    """What a job function may do to its own row."""

    def __init__(self, job_id: str, tenant_id: int, actor_id: int | None):
        self.job_id = job_id
        self.tenant_id = tenant_id
        self.actor_id = actor_id

    def progress(self, percent: int | None = None, stage: str | None = None) -> None:
        job_service.progress(self.job_id, percent=percent, stage=stage)

    def log(self, line: str) -> None:
        job_service.progress(self.job_id, log_line=line)


def run_job(job_id: str) -> str:
    """Entry point for every dispatcher. Returns the final status."""
    return run_in_app(lambda: _run(job_id))


def run_in_app(fn):
    """Call `fn` in the app context that `flask worker` or the in-process pool pushed."""
    if not has_app_context():
        raise RuntimeError("Sandlot jobs run under `flask worker`, which provides the app.")
    return fn()


def _run(job_id: str) -> str:
    try:
        if not job_service.claim(job_id):
            return "skipped"
        job = db.session.get(Job, job_id)
        ctx = JobContext(job.id, job.tenant_id, job.actor_id)
        kind, params = KINDS.get(job.kind), dict(job.params or {})
        with _heartbeat(current_app._get_current_object(), job_id, job.timeout_sec):
            status = _call(kind, ctx, params, job.kind)
        return status
    finally:
        db.session.remove()


def _call(kind, ctx: JobContext, params: dict, name: str) -> str:
    if kind is None:
        job_service.finish(ctx.job_id, JobStatus.errored, error=f"Unknown job kind {name!r}.")
        return JobStatus.errored.value
    try:
        result = kind(ctx, **params)
    except BaseTimeoutException:
        # RQ's death penalty: let it reach the worker so RQ records a failure and runs
        # the on_failure callback, which marks the row (see queue.mark_errored).
        raise
    except JobFailed as exc:
        job_service.finish(ctx.job_id, JobStatus.failed, error=str(exc))
        return JobStatus.failed.value
    except Exception as exc:
        db.session.rollback()
        log.exception("job %s (%s) errored", ctx.job_id, name)
        job_service.finish(ctx.job_id, JobStatus.errored,
                           error=f"Unexpected error ({type(exc).__name__}); see the worker log.")
        return JobStatus.errored.value
    job_service.finish(ctx.job_id, JobStatus.succeeded, result=result)
    return JobStatus.succeeded.value


@contextmanager
def _heartbeat(app: Flask, job_id: str, timeout_sec: int):
    """Beat every JOB_HEARTBEAT_SECONDS until the job returns or overruns its timeout."""
    stop = threading.Event()
    interval = app.config["JOB_HEARTBEAT_SECONDS"]

    def beat() -> None:
        with app.app_context():
            elapsed = 0.0
            while not stop.wait(interval) and elapsed < timeout_sec:
                elapsed += interval
                try:
                    job_service.heartbeat(job_id)
                except Exception:  # a missed beat is survivable; the reaper judges silence
                    log.warning("heartbeat for job %s failed", job_id, exc_info=True)
                finally:
                    db.session.remove()

    thread = threading.Thread(target=beat, name=f"heartbeat-{job_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval + 1)
