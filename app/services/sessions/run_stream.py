"""A run's live view as server-sent events: output chunks, then one final frame.

Reads the run's row (written by its pool thread, app.services.sessions.runs) and is woken by the
install streams' notify the moment the row changes, so a stream holds no database
connection and no sandbox while it waits (docs/streams.md).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

from flask import current_app

from app.extensions import db
from app.models import ExecRun, RunStatus
from app.services.sessions.runs import settle_lost
from app.services.skills.installs.stream import _wait, sse

STREAMS = ("stdout", "stderr")


def final_frame(run: ExecRun) -> dict[str, Any]:
    return {"done": True, "status": str(run.status), "exit_code": run.exit_code,
            "duration_ms": run.duration_ms, "truncated": run.truncated,
            "egress_denied": run.egress_denied,
            "error": run.error}


def _read(run_id: str) -> ExecRun | None:
    run = db.session.get(ExecRun, run_id, populate_existing=True)
    return settle_lost(run) if run is not None else None


def follow(run_id: str, waiter: queue.SimpleQueue) -> Iterator[str]:
    """Every chunk of output as it is stored, then the verdict. Once a stream's output
    passes the stored cap, its middle is dropped: the stream says so once and the rest
    is in the run's tail (GET the run)."""
    config = current_app.config
    keepalive = float(config.get("SKILL_STREAM_KEEPALIVE_SECONDS", 5.0))
    max_seconds = float(config["SKILL_STREAM_MAX_SECONDS"])
    poll = float(config.get("RUN_STREAM_POLL_SECONDS", 5.0 if config.get("REDIS_URL")
                            else 0.5))
    sent = {name: 0 for name in STREAMS}
    cut = {name: False for name in STREAMS}
    start = last_write = time.monotonic()
    while True:
        run = _read(run_id)
        if run is None:
            yield sse({"done": True, "status": "removed"})
            return
        for name in STREAMS:
            text, total = getattr(run, name), getattr(run, f"{name}_bytes")
            if cut[name]:
                continue
            if len(text.encode()) < total and "bytes omitted ...]" in text:
                cut[name] = True
                yield sse({"stream": name, "omitted": True})
                continue
            if len(text) > sent[name]:
                yield sse({"stream": name, "text": text[sent[name]:]})
                sent[name], last_write = len(text), time.monotonic()
        if run.status != RunStatus.running:
            yield sse(final_frame(run))
            return
        db.session.remove()  # no pooled connection is held while waiting
        now = time.monotonic()
        if now - start >= max_seconds:
            yield sse({"done": True, "status": "detached"})
            return
        if now - last_write >= keepalive:
            yield ": keep-alive\n\n"
            last_write = now
        _wait(waiter, min(poll, keepalive))
