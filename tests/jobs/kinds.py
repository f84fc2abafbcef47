"""Test-only job kinds, registered on import (by tests/jobs/conftest.py and worker_app.py).

They exist to drive the runner and the dispatchers into each outcome: a slow run (heartbeat,
timeout), a crash that escapes the kind's error handling, a run held open by the test.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import Any

from app.jobs.registry import job_kind

RUNS: Counter[str] = Counter()  # job id -> how many times a kind body ran (this process)
GATES: dict[str, threading.Event] = {}  # name -> event a `tests.block` run waits on


@job_kind("tests.count")
def count_runs(ctx, **_: Any) -> dict[str, Any]:
    RUNS[ctx.job_id] += 1
    return {"runs": RUNS[ctx.job_id]}


@job_kind("tests.sleep")
def sleep(ctx, seconds: float = 1.0, **_: Any) -> dict[str, Any]:
    """Sleep without touching the row, so only the heartbeat thread can move heartbeat_at."""
    time.sleep(seconds)
    return {"slept": seconds}


@job_kind("tests.exit")
def exit_process(ctx, **_: Any) -> None:
    """A crash the runner does not turn into an outcome itself (SystemExit is no Exception)."""
    sys.exit("tests.exit: simulated crash")


@job_kind("tests.block")
def block(ctx, gate: str, **_: Any) -> dict[str, Any]:
    """Hold a worker thread until the test opens `gate` (bounded, so a failed test cannot hang)."""
    opened = GATES[gate].wait(timeout=30)
    return {"opened": opened}
