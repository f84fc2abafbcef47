"""`flask worker`: an RQ worker in the app context, with the reaper beside it."""

from __future__ import annotations

import click
from flask import Flask
from redis import Redis
from rq import Queue, SimpleWorker

from app.extensions import db
from app.jobs.queue import queue_name, start_reaper
from app.services.skills.installs import control as skill_runs


def _reap_skill_runs(app: Flask) -> None:
    """At worker start: installs whose job already ended (a worker killed mid-run) are
    marked failed now rather than at the reaper's first pass (reference 7.2)."""
    with app.app_context():
        try:
            skill_runs.reap()
        finally:
            db.session.remove()


def run_worker(app: Flask, burst: bool = False) -> None:
    url = app.config.get("REDIS_URL")
    if not url:
        raise click.ClickException("REDIS_URL is not set; without it jobs run in-process.")
    connection = Redis.from_url(url)
    # SimpleWorker runs jobs in this process, so the app context pushed by the CLI holds;
    # RQ's death penalty still enforces each job's timeout.
    queue = Queue(queue_name(app), connection=connection)
    worker = SimpleWorker([queue], connection=connection)
    if not burst:
        _reap_skill_runs(app)
        start_reaper(app)
    worker.work(burst=burst, with_scheduler=False)
