"""`flask worker`: an RQ worker in the app context, with the reaper beside it."""

from __future__ import annotations

import click
from flask import Flask
from redis import Redis
from rq import Queue, SimpleWorker

from app.jobs.queue import queue_name, start_reaper


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
        start_reaper(app)
    worker.work(burst=burst, with_scheduler=False)
