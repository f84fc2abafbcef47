"""Per-kind job time limits and the per-tenant fair share (decisions 12, issue 11 item 5).

Decision: every job kind states how long its work may take, and that limit is enforced
by whichever dispatcher runs it: RQ stops the run at its `job_timeout` (death penalty);
the in-process pool marks the row `failed` at the limit and frees the worker slot. A
Python thread cannot be killed, so an in-process run past its limit keeps its thread
until its own blocking calls time out; that is why each kind bounds every blocking call
well below its limit (the numbers below say how), and why the limit is a promise about
the row and the slot, not about the thread.

Decision: one tenant may hold at most `share` workers at once, where the share is
JOB_TENANT_SHARE if set, else one less than the workers (at least 1). Its further jobs
wait, in order, while other tenants' jobs run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from app.backends.base import BackendTimeout

# The sandbox check: its whole budget (reference 5.4), then a deep check's cleanup.
CHECK_BUDGET_SEC = 90
CHECK_CLEANUP_SEC = 30

# Session removals: the provider calls of one removal together, run on a helper thread
# (session_end.REMOVAL_BUDGET_SEC), whatever a config's http_timeout_sec says.
REMOVAL_BUDGET_SEC = 120
# A removed member's sessions: removals done inline for this long, the rest queued.
MEMBER_EXIT_BUDGET_SEC = 120

LIMITS: dict[str, int] = {
    # The check stops at its 90 s budget; a deep check then deletes its sandbox (30 s).
    "sandbox_check": CHECK_BUDGET_SEC + CHECK_CLEANUP_SEC + 30,
    # Fetch, build sandbox, install commands of at most 600 s each, commit the image.
    "install_skill": 3600,
    "uninstall_skill": 3600,
    # One removal's provider calls are bounded together (REMOVAL_BUDGET_SEC).
    "remove_sandboxes": REMOVAL_BUDGET_SEC + 60,
    # Inline removals stop at MEMBER_EXIT_BUDGET_SEC, plus one removal in flight.
    "end_member_sessions": MEMBER_EXIT_BUDGET_SEC + REMOVAL_BUDGET_SEC + 60,
    # Template builds: each poll is one bounded HTTP call; a build may take many minutes.
    "provision_templates": 3600,
    # Database only, at most 100,000 rows.
    "audit_export": 300,
}

LABELS: dict[str, str] = {
    "sandbox_check": "a sandbox check",
    "install_skill": "a skill install",
    "uninstall_skill": "a skill uninstall",
    "remove_sandboxes": "a sandbox removal",
    "end_member_sessions": "ending a removed member's sessions",
    "audit_export": "an audit export",
    "provision_templates": "a template build",
}


def limit_for(kind: str, default: int) -> int:
    """The kind's time limit in seconds (`default` for a kind without one)."""
    return LIMITS.get(kind, default)


def overrun_reason(kind: str, limit: int | None) -> str:
    """What the row says when its run was stopped at the limit."""
    what = LABELS.get(kind, "this job")
    return f"Stopped at its time limit: {what} may run for at most {limit} s."


def tenant_share(workers: int, configured: int | None) -> int:
    """How many workers one tenant may hold at once."""
    if configured:
        return max(1, configured)
    return max(1, workers - 1)


# -- bounded calls: a blocking step waited for at most its share of a budget ------------

class OutOfBudget(Exception):
    """The budget was spent before this step could start."""


def bounded(fn: Callable[[], Any], seconds: float) -> Any:
    """`fn()` on a helper thread, waited for at most `seconds` (then BackendTimeout; the
    thread finishes on its own: see Creation for the one call whose result matters)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="sandbox-check-step", daemon=True).start()
    if not done.wait(max(0.0, seconds)):
        raise BackendTimeout(f"no answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")
