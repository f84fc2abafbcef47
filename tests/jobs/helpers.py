"""Helpers for the job tests: fresh row reads, bounded polling, audit seeding, RQ cleanup."""

from __future__ import annotations

import time

import pytest
from flask import Flask

from app.extensions import db
from app.jobs.queue import queue_name
from app.models import Job
from app.services import audit

WAIT_SECONDS = 20


def rq_connection(app: Flask):
    from redis import Redis

    return Redis.from_url(app.config["REDIS_URL"])


def rq_job(app: Flask, job_id: str):
    from rq.job import Job as RQJob

    return RQJob.fetch(job_id, connection=rq_connection(app))


def delete_queue(app: Flask) -> None:
    """Remove the test queue, its registries and its jobs from the shared Redis."""
    from rq import Queue

    queue = Queue(queue_name(app), connection=rq_connection(app))
    registries = [queue.started_job_registry, queue.finished_job_registry,
                  queue.failed_job_registry, queue.deferred_job_registry,
                  queue.scheduled_job_registry, queue.canceled_job_registry]
    for registry in registries:
        for job_id in registry.get_job_ids():
            queue.connection.delete(f"rq:job:{job_id}", f"rq:results:{job_id}")
        queue.connection.delete(registry.key)
    queue.delete(delete_jobs=True)


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
