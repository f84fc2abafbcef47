"""Helpers for the job tests: fresh row reads, bounded polling, audit seeding, RQ cleanup."""

from __future__ import annotations

import subprocess
import time

import pytest
from flask import Flask

from app.extensions import db
from app.jobs.queue import queue_name
from app.models import Job, JobStatus
from app.services import audit

WAIT_SECONDS = 20


def rq_connection(app: Flask):
    from redis import Redis

    return Redis.from_url(app.config["REDIS_URL"])


def rq_job(app: Flask, job_id: str):
    from rq.job import Job as RQJob

    return RQJob.fetch(job_id, connection=rq_connection(app))


def delete_queue(app: Flask) -> None:
    """Remove the test queue, its registries, its jobs and its workers' registrations
    (a killed worker's would stay until its key expires) from the shared Redis."""
    from rq import Queue, worker_registration

    queue = Queue(queue_name(app), connection=rq_connection(app))
    registries = [queue.started_job_registry, queue.finished_job_registry,
                  queue.failed_job_registry, queue.deferred_job_registry,
                  queue.scheduled_job_registry, queue.canceled_job_registry]
    for registry in registries:
        for job_id in registry.get_job_ids():
            queue.connection.delete(f"rq:job:{job_id}", f"rq:results:{job_id}")
        queue.connection.delete(registry.key)
    queue.delete(delete_jobs=True)
    for key in worker_registration.get_keys(queue=queue):
        queue.connection.srem(worker_registration.REDIS_WORKER_KEYS, key)
        queue.connection.delete(key)
    queue.connection.delete(worker_registration.WORKERS_BY_QUEUE_KEY % queue.name)


def wait_for_terminal(job_id: str, seconds: float = WAIT_SECONDS) -> Job:
    """Poll the row (fresh reads, no sleeping in app code) until it is terminal or time is up."""
    deadline = time.monotonic() + seconds
    while True:
        db.session.expire_all()
        job = db.session.get(Job, job_id)
        if job is not None and job.is_terminal:
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} not terminal after {seconds}s: "
                        f"{job.status if job else 'no row'}")
        time.sleep(0.05)


def wait_running(job_id: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while fresh_row(job_id).status != JobStatus.running:
        assert time.monotonic() < deadline, f"job {job_id} never started"
        time.sleep(0.05)


def seed_audit(tenant, marker: str, count: int = 3) -> list[str]:
    """`count` audit events on `tenant` whose object ids carry `marker`; returns those ids."""
    ids = [f"{marker}-{n}" for n in range(count)]
    for object_id in ids:
        audit.record(tenant, audit.SystemActor("tests"), "tests.event", "thing", object_id)
    db.session.commit()
    return ids


def fresh_row(job_id: str) -> Job:
    db.session.expire_all()
    return db.session.get(Job, job_id)


def wait_for_workers(app: Flask, count: int, seconds: float = 30) -> None:
    """Until `count` workers are registered on the app's queue."""
    from rq import Worker

    queue = app.extensions["sandlot_dispatcher"].queue
    deadline = time.monotonic() + seconds
    while Worker.count(queue=queue) < count:
        assert time.monotonic() < deadline, "the RQ workers did not start"
        time.sleep(0.1)


def stop_worker(worker: subprocess.Popen) -> None:
    """SIGTERM is RQ's warm shutdown: the worker finishes its job and leaves."""
    worker.terminate()
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(timeout=10)
