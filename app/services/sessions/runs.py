"""Exec runs: commands that never hold a web thread (issue 11 item 1, decisions 12).

`start` checks the request up front (the same refusals as a direct exec), stores a
`running` row and hands the command to a bounded thread pool of this process; the
request then waits at most RUN_SYNC_WAIT_SECONDS for it. The pool thread writes the
run's output to its row as it arrives (at most every FLUSH_SEC) and wakes the run's
event streams, so history, polling and SSE read rows, never the sandbox.

Why a per-process pool and not the job layer: jobs are batch work with per-kind limits
and a fair share on a pool of 2 (or RQ workers that may be elsewhere); an exec needs its
first byte within milliseconds and its output live, and spends its life waiting on the
engine's socket, so a parked thread is cheap. The pool is bounded (RUNS_MAX threads per
process: 503 past it), and a member (RUNS_PER_MEMBER) and a workspace
(RUNS_PER_TENANT_MAX) have at most so many runs at once across processes (capacity holds:
429 `quota_exceeded` past them); a run is refused, never queued behind a long command.

A run cannot outlive its process. One that outlives the request's wait names its process
(`owner`) and carries a heartbeat that one thread of that process refreshes every
RUN_HEARTBEAT_SECONDS for all the runs it executes; the reaper pass of any process marks a
`running` run whose heartbeat is older than RUN_LOST_SECONDS `lost` and wakes its streams.
A row without a heartbeat (stored before heartbeats) is lost once well past its timeout.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from datetime import timedelta

from flask import Flask, current_app
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from app.backends.base import BackendError
from app.errors import AppError, Conflict, NotFound, Unavailable
from app.extensions import db
from app.models import ExecRun, RunStatus, SandboxSession, Tenant, User
from app.models.types import utcnow
from app.services import capacity, paging
from app.services import wakeups as notify
from app.services.sessions import lifecycle
from app.services.sessions.run_output import Capture, LiveHooks

log = logging.getLogger("sandlot.runs")
FLUSH_SEC = 0.5
LOST_GRACE = timedelta(seconds=120)  # no heartbeat: past timeout + this, it was lost
LOST = ("The server running this command stopped, so its result is unknown; the command was "
        "ended and the sandbox is kept.")
PAGE_MAX = 100


@dataclass(frozen=True)
class Started:
    run_id: str
    run: ExecRun | None  # read back only when it outlived the wait (the 202 shows it)
    outcome: lifecycle.ExecOutcome | None  # set when it finished within the wait


class _CancelledBeforeStart(BackendError):
    pass


class _Pool:
    """This process's run threads (refuse, never queue); each run also holds a capacity
    hold, so a member's and a workspace's runs are counted across processes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executor: ThreadPoolExecutor | None = None
        self.total = 0
        self.running: dict[str, Future] = {}  # run id -> its thread's future

    def take(self, total_max: int) -> bool:
        with self.lock:
            if self.total >= total_max:
                return False
            self.total += 1
            if self.executor is None:
                self.executor = ThreadPoolExecutor(max_workers=total_max,
                                                   thread_name_prefix="exec-run")
            return True

    def track(self, app: Flask, run_id: str, future: Future, hold_id: str) -> None:
        with self.lock:
            self.running[run_id] = future

        def ended(_: Future) -> None:
            with self.lock:
                self.running.pop(run_id, None)
            _heartbeats(app).discard(run_id)
            self.release()
            with app.app_context():
                capacity.release(hold_id)

        future.add_done_callback(ended)

    def drain(self, seconds: float) -> list[str]:
        """Wait up to `seconds` for the runs in flight; the ids of those still running
        (a shutdown, or a test that must not leave work behind, uses it)."""
        with self.lock:
            running = dict(self.running)
        _, pending = wait_all(running.values(), timeout=seconds)
        return [run_id for run_id, future in running.items() if future in pending]

    def release(self) -> None:
        with self.lock:
            self.total -= 1


def _pool(app: Flask) -> _Pool:
    return app.extensions.setdefault("exec_run_pool", _Pool())


def drain(app: Flask, seconds: float) -> list[str]:
    """The ids of `app`'s runs still going after waiting up to `seconds` for them."""
    return _pool(app).drain(seconds)


def channel(run_id: str) -> str:
    """The wake-up key of a run's event streams (the install streams' notify)."""
    return f"run:{run_id}"


_OWNER: tuple[int, str] = (0, "")


def owner() -> str:
    """This process, as a run's row names it: host, pid and a token drawn at its start
    (a forked worker draws its own), so a later process with the same pid is not it."""
    global _OWNER
    pid = os.getpid()
    if _OWNER[0] != pid:
        _OWNER = (pid, f"{socket.gethostname()[:150]}:{pid}:{secrets.token_hex(8)}")
    return _OWNER[1]


_HEARTBEATS_LOCK = threading.Lock()


def _heartbeats(app: Flask) -> capacity.Renewer:
    """The runs this process executes past their request's wait, refreshed together."""
    with _HEARTBEATS_LOCK:
        if "exec_run_heartbeats" not in app.extensions:
            app.extensions["exec_run_heartbeats"] = capacity.Renewer(
                app, "exec-run-heartbeat", lambda: float(app.config["RUN_HEARTBEAT_SECONDS"]),
                _beat)
        return app.extensions["exec_run_heartbeats"]


def _beat(run_ids: dict) -> None:
    with db.engine.begin() as conn:
        conn.execute(update(ExecRun).where(ExecRun.id.in_(list(run_ids)),
                                           ExecRun.status == RunStatus.running)
                     .values(heartbeat_at=utcnow()))


# -- starting and waiting ------------------------------------------------------------------

def start(tenant: Tenant, user: User, session: SandboxSession, command: str,
          timeout_sec: int | None = None, skill: str | None = None,
          keep_processes: bool = False) -> Started:
    """Create a run and execute it off this thread; wait up to RUN_SYNC_WAIT_SECONDS.

    Refusals a direct exec would give (bad command, scripts off, cordoned config, a
    skill's missing variables) come before any row is written. A run that fails within
    the wait raises its error, as a direct exec would.
    """
    prepared = lifecycle.precheck(tenant, user, session, command, timeout_sec, skill)
    if keep_processes:
        prepared = dataclasses.replace(prepared, keep_processes=True)
    app = current_app._get_current_object()
    config = app.config
    if not _pool(app).take(int(config["RUNS_MAX"])):
        raise Unavailable("Too many commands are running on this server; retry shortly.")
    try:
        hold = capacity.admit(
            capacity.Use("run", tenant.id, f"user:{user.id}", session.id),
            (capacity.Limit("runs_per_member", "member", int(config["RUNS_PER_MEMBER"])),
             capacity.Limit("runs_per_workspace", "workspace",
                            int(config["RUNS_PER_TENANT_MAX"]))),
            "commands running", "wait for one to end, or stop one.")
    except BaseException:
        _pool(app).release()
        raise
    try:
        writer = _RunWriter({
            "id": str(uuid.uuid4()), "tenant_id": tenant.id, "session_id": session.id,
            "user_id": user.id, "command": command, "skill": skill,
            "timeout_sec": prepared.timeout, "created_at": utcnow()}, prepared)
        # No transaction stays open while the run's thread writes (SQLite's writer
        # would wait on this reader).
        db.session.commit()
        assert _pool(app).executor is not None
        future = _pool(app).executor.submit(_execute, app, writer)
    except BaseException:
        _pool(app).release()
        capacity.release(hold)
        raise
    _pool(app).track(app, writer.run_id, future, hold)
    wait = float(config["RUN_SYNC_WAIT_SECONDS"])
    try:
        outcome = future.result(timeout=wait)
    except TimeoutError:
        outcome = None
        writer.persist()  # it outlives the request: its row exists before the 202
    if outcome is not None and writer.stored:  # its verdict is the answer: no read back
        return Started(writer.run_id, None, outcome)
    run = db.session.get(ExecRun, writer.run_id, populate_existing=True)
    if run is None:  # its session was ended meanwhile, and its runs with it
        raise NotFound("No such session.")
    return Started(run.id, run, outcome)


def _execute(app: Flask, writer: _RunWriter) -> lifecycle.ExecOutcome:
    """The pool thread: run the command, keep its row current, leave a verdict."""
    with app.app_context():
        try:
            return writer.execute()
        finally:
            db.session.remove()


class _RunWriter:
    """A run's state, shared by its thread and the request that started it.

    The row is written once when the command ends within the request's wait (the usual
    case: one INSERT with the verdict, in the same transaction as the session's
    last_used_at/exec_count). Only a run that outlives the wait gets its `running` row
    first (`persist`, from the request, before the 202 that names it), and from then on
    its output and verdict are UPDATEs. `lock` orders the two threads around that switch.
    """

    def __init__(self, values: dict, prepared: lifecycle.Prepared | None = None):
        self.values = values
        self.prepared = prepared  # what the request's checks read: not read again
        self.run_id: str = values["id"]
        self.out, self.err = Capture(), Capture()
        self.flushed = 0.0
        self.lock = threading.Lock()
        self.persisted = False
        self.stored = False  # its row was inserted (False: the session was gone)
        self.hooks = LiveHooks(on_output=self.output, on_started=self.started)

    def execute(self) -> lifecycle.ExecOutcome:
        values = self.values
        session = db.session.get(SandboxSession, values["session_id"])
        started = time.monotonic()
        try:
            if session is None or self.prepared is None:
                raise NotFound("No such session.")
            outcome = lifecycle.exec_prepared(session, values["command"], self.prepared,
                                             live=self.hooks)
        except Exception as exc:
            db.session.rollback()
            message = exc.message if isinstance(exc, AppError) else "The command could not run."
            if not isinstance(exc, AppError):
                log.exception("run %s failed", self.run_id)
            self._finish(RunStatus.failed, None, int((time.monotonic() - started) * 1000),
                         error=message[:300])
            raise
        self.out.replace(outcome.stdout.encode(), max(self.out.total, len(outcome.stdout)))
        self.err.replace(outcome.stderr.encode(), max(self.err.total, len(outcome.stderr)))
        status = (RunStatus.timed_out if outcome.timed_out
                  else RunStatus.succeeded if outcome.exit_code == 0 else RunStatus.failed)
        self._finish(status, outcome.exit_code, outcome.duration_ms, sandbox=outcome.sandbox_id,
                     touched=True, egress_denied=outcome.egress_denied or None,
                     new_output_files=outcome.new_files)
        return outcome

    def persist(self) -> None:
        """Store the run as `running`, owned by this process and kept alive by its
        heartbeat, unless its thread already stored its verdict."""
        with self.lock:
            if not self.persisted:
                self._insert({**self.values, "owner": owner(), "heartbeat_at": utcnow()},
                             touched=False)
                if self.stored:
                    _heartbeats(current_app._get_current_object()).add(self.run_id)

    # hooks, called from inside the exec
    def started(self, ref: str) -> None:
        with self.lock:
            self.values["exec_ref"] = ref[:200]
            if not self.persisted:  # nobody knows its id yet, so nobody can cancel it
                return
            with db.engine.begin() as conn:
                conn.execute(update(ExecRun).where(ExecRun.id == self.run_id)
                             .values(exec_ref=ref[:200]))
                cancelled = conn.scalar(select(ExecRun.cancel_requested)
                                        .where(ExecRun.id == self.run_id))
        if cancelled:
            raise _CancelledBeforeStart("the command was stopped before it started")

    def output(self, stream: int, chunk: bytes) -> None:
        with self.lock:
            (self.out if stream == 1 else self.err).add(chunk)
            if not self.persisted or time.monotonic() - self.flushed < FLUSH_SEC:
                return
            self.flushed = time.monotonic()
            self._write({})

    def _output(self) -> dict:
        secrets = self.hooks.secrets
        return {"stdout": self.out.text(secrets), "stderr": self.err.text(secrets),
                "stdout_bytes": self.out.total, "stderr_bytes": self.err.total,
                "truncated": self.out.omitted > 0 or self.err.omitted > 0,
                "updated_at": utcnow()}

    def _insert(self, values: dict, touched: bool) -> None:
        """Caller holds `lock`. The row's first write; the session's count with it."""
        try:
            with db.engine.begin() as conn:
                # parameters, not .values(): one cached statement whatever the row holds
                conn.execute(insert(ExecRun), [{**values, **self._output()}])
                if touched:
                    lifecycle.touch(conn, values["session_id"])
        except IntegrityError:  # the session was ended meanwhile: nothing to keep
            log.info("run %s: its session is gone", self.run_id)
        else:
            self.stored = True
        self.persisted = True

    def _write(self, values: dict) -> None:
        """Caller holds `lock` and the row exists. A run the reaper marked `lost` keeps
        that first outcome (its stream ended on it, and its command was ended)."""
        with db.engine.begin() as conn:
            conn.execute(update(ExecRun).where(ExecRun.id == self.run_id,
                                               ExecRun.status == RunStatus.running)
                         .values(**self._output(), **values))
        notify.publish(channel(self.run_id))

    def _finish(self, status: RunStatus, exit_code: int | None, duration_ms: int,
                error: str | None = None, sandbox: str | None = None,
                touched: bool = False, egress_denied: list[dict] | None = None,
                new_output_files: int | None = None) -> None:
        values = {"status": status, "exit_code": exit_code, "duration_ms": duration_ms,
                  "finished_at": utcnow(), "error": error, "egress_denied": egress_denied,
                  "new_output_files": new_output_files}
        if sandbox:
            values["sandbox_id"] = sandbox
        with self.lock:
            if not self.persisted:  # ended within the wait: one INSERT, one commit
                self._insert({**self.values, **values}, touched)
                return
            with db.engine.begin() as conn:
                if conn.scalar(select(ExecRun.cancel_requested)
                               .where(ExecRun.id == self.run_id)):
                    values["status"] = RunStatus.cancelled
                if touched:
                    lifecycle.touch(conn, self.values["session_id"])
            self._write(values)


# -- reading ----------------------------------------------------------------------------

def get_run(session: SandboxSession, run_id: str) -> ExecRun:
    """A run of `session` (already resolved as the caller's own); anything else is 404."""
    run = db.session.get(ExecRun, run_id, populate_existing=True)
    if run is None or run.session_id != session.id or run.tenant_id != session.tenant_id:
        raise NotFound("No such run.")
    return settle_lost(run)


def list_runs(session: SandboxSession, limit: int = 20, offset: int = 0) -> list[ExecRun]:
    """The session's runs, newest first."""
    rows = db.session.scalars(select(ExecRun).where(
        ExecRun.session_id == session.id, ExecRun.tenant_id == session.tenant_id)
        .order_by(ExecRun.created_at.desc(), ExecRun.id).limit(min(limit, PAGE_MAX))
        .offset(offset))
    return [settle_lost(run) for run in rows]


def runs_page(session: SandboxSession, window: paging.Window) -> paging.Slice[ExecRun]:
    """One page of the session's runs, newest first."""
    page = paging.keyset(select(ExecRun).where(
        ExecRun.session_id == session.id, ExecRun.tenant_id == session.tenant_id),
        (ExecRun.created_at, ExecRun.id), window, desc=True)
    page.rows = [settle_lost(run) for run in page.rows]
    return page


def settle_lost(run: ExecRun) -> ExecRun:
    """A run still `running` whose process stopped refreshing it (or, stored without a
    heartbeat, long past its timeout) lost its process: it reads as `lost`."""
    if run.status != RunStatus.running:
        return run
    now = utcnow()
    if run.heartbeat_at is not None:
        dead = now - run.heartbeat_at > _lost_after()
    else:
        dead = now - run.created_at > timedelta(seconds=run.timeout_sec) + LOST_GRACE
    if dead:
        run.status, run.finished_at, run.error = RunStatus.lost, now, LOST
        db.session.commit()
        notify.publish(channel(run.id))
    return run


def reap_lost() -> int:
    """Reaper pass: mark `lost` every `running` run whose process stopped refreshing its
    heartbeat, whichever process owned it, and wake its streams; how many."""
    cutoff = utcnow() - _lost_after()
    stale = (ExecRun.status == RunStatus.running, ExecRun.heartbeat_at < cutoff)
    ids = list(db.session.scalars(select(ExecRun.id).where(*stale)))
    if not ids:
        return 0
    now = utcnow()
    marked = db.session.execute(update(ExecRun).where(ExecRun.id.in_(ids), *stale).values(
        status=RunStatus.lost, finished_at=now, updated_at=now, error=LOST)).rowcount
    db.session.commit()
    for run_id in ids:
        notify.publish(channel(run_id))
    if marked:
        log.warning("marked %d runs lost: their process stopped", marked)
    return marked


def end_lost() -> int:
    """Reaper pass: nobody will read a lost run's result, so end its command, and what it
    started, through the engine now rather than at its timeout (the sandbox and its files
    stay); however it was marked (this pass, or a read of the run). One reaper claims
    each run; a provider that fails is logged, not retried. How many were ended."""
    since = utcnow() - timedelta(hours=1)
    lost = list(db.session.scalars(select(ExecRun).where(
        ExecRun.status == RunStatus.lost, ExecRun.exec_ref.is_not(None),
        ExecRun.cancel_requested.is_(False), ExecRun.finished_at > since)))
    ended = 0
    for run in lost:
        claimed = db.session.execute(update(ExecRun).where(
            ExecRun.id == run.id, ExecRun.cancel_requested.is_(False))
            .values(cancel_requested=True)).rowcount
        db.session.commit()
        session = db.session.get(SandboxSession, run.session_id)
        if not claimed or session is None or not lifecycle.can_cancel(session):
            continue
        try:
            lifecycle.cancel_exec(session, run.exec_ref)
            ended += 1
        except AppError as exc:
            db.session.rollback()
            log.warning("could not end lost run %s: %s", run.id, exc.message)
    return ended


def _lost_after() -> timedelta:
    return timedelta(seconds=float(current_app.config["RUN_LOST_SECONDS"]))


# -- cancelling -------------------------------------------------------------------------

def cancel(session: SandboxSession, run: ExecRun) -> ExecRun:
    """Stop a running command and everything it started (its process group and what
    left it). Answers within a few seconds; the run's thread writes the verdict."""
    if run.status != RunStatus.running:
        raise Conflict("This command is no longer running.", code="run_not_running")
    if not lifecycle.can_cancel(session):
        raise Conflict("This sandbox provider cannot stop a running command; it ends at "
                       "its timeout.", code="run_not_cancellable")
    db.session.execute(update(ExecRun).where(ExecRun.id == run.id)
                       .values(cancel_requested=True))
    db.session.commit()
    db.session.refresh(run)
    if run.exec_ref:
        lifecycle.cancel_exec(session, run.exec_ref)
    return run

