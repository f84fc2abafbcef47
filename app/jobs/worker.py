"""`flask worker`: an RQ worker in the app context, with the reaper beside it."""

from __future__ import annotations

import logging
import threading

import click
from flask import Flask
from redis import Redis
from rq import Queue, SimpleWorker

from app.extensions import db
from app.jobs.queue import queue_name, start_reaper
from app.services.skills.installs import control as skill_runs

log = logging.getLogger("sandlot.jobs")
# Refresh the worker's RQ `last_heartbeat`, only while its key exists: a beat after the
# key expired must not recreate it without an expiry.
BEAT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'last_heartbeat', ARGV[1])
return 1
"""


def _reap_skill_runs(app: Flask) -> None:
    """At worker start: installs whose job already ended (a worker killed mid-run) are
    marked failed now rather than at the reaper's first pass (reference 7.2)."""
    with app.app_context():
        try:
            skill_runs.reap()
        finally:
            db.session.remove()


def _pulse(worker: SimpleWorker, interval: float, stop: threading.Event) -> None:
    """Refresh the worker's `last_heartbeat` every `interval` seconds, busy or idle, until
    `stop` is set. RQ refreshes it only between jobs (a SimpleWorker running an hour-long
    install beats once, at its start); the fair share counts the workers whose beat is
    recent (RQDispatcher.live_workers), so one killed outright stops counting within a
    few beats instead of when its key expires (minutes, or the running job's limit)."""
    from rq.utils import now, utcformat

    beat = worker.connection.register_script(BEAT)
    while not stop.wait(interval):
        try:
            beat(keys=[worker.key], args=[utcformat(now())])
        except Exception:  # Redis away: RQ's own loop fails too; try again next beat
            log.warning("worker %s could not send its heartbeat", worker.name, exc_info=True)


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
    stop = threading.Event()
    threading.Thread(target=_pulse, args=(worker, app.config["JOB_HEARTBEAT_SECONDS"], stop),
                     name="sandlot-worker-pulse", daemon=True).start()
    try:
        worker.work(burst=burst, with_scheduler=False)
    finally:
        stop.set()
