"""The two install streams: progress frames (reference 7.3) and the transcript (7.5).

Both read the durable event rows (decisions 8) and are woken by `notify` the moment a
worker writes one. A stream holds no database connection while it waits (the session is
returned between reads), so hundreds can be open at once; see docs/streams.md.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from typing import Any

from flask import current_app
from sqlalchemy import select

from app.errors import NotFound
from app.extensions import db
from app.models import EventKind, InstalledSkill, InstallStatus, SkillInstallEvent
from app.services.skills.installs import plan, wording

IN_FLIGHT = (InstallStatus.installing, InstallStatus.removing)
FRAME_KINDS = (EventKind.progress, EventKind.command, EventKind.note, EventKind.error)
TERMINAL_STAGES = ("done", "failed")
DETACHED_LOG = "stopped following this run; reconnect or poll the skill for its status"
HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}


def sse(data: dict[str, Any]) -> str:
    return f"event: message\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _settings() -> tuple[float, float, float]:
    config = current_app.config
    return (float(config.get("SKILL_STREAM_KEEPALIVE_SECONDS", 5.0)),
            float(config["SKILL_STREAM_MAX_SECONDS"]),
            # Without Redis nothing from another process can wake a stream: poll the rows.
            float(config.get("SKILL_STREAM_POLL_SECONDS", 5.0 if config.get("REDIS_URL")
                                                           else 1.0)))


def _row(skill_id: str) -> InstalledSkill | None:
    row = db.session.get(InstalledSkill, skill_id, populate_existing=True)
    return None if row is None or row.deleted_at is not None else row


def progress_frame(event: SkillInstallEvent) -> dict[str, Any] | None:
    """The 7.3 frame of one event; None for events that are transcript only."""
    if event.kind not in FRAME_KINDS:
        return None
    terminal = event.stage in TERMINAL_STAGES
    if event.kind == EventKind.note and terminal:
        return None  # "run ended: ..." precedes the failed frame that carries the verdict
    frame: dict[str, Any] = {"percent": event.percent, "stage": event.stage}
    if event.message:
        frame["log"] = event.message.splitlines()[-1][:500] if event.kind == EventKind.command \
            else event.message[:2000]
    if event.status:
        frame["status"] = event.status
    frame["done"] = terminal
    return frame


def terminal_frame(row: InstalledSkill | None) -> dict[str, Any] | None:
    """Reference 7.3 step 5: the verdict read from the row, or None while it is in flight."""
    if row is None:
        return {"percent": 100, "stage": "done", "status": "removed", "done": True}
    if row.status in IN_FLIGHT:
        return None
    if row.status == InstallStatus.failed:
        return {"percent": 100, "stage": "failed", "status": "failed",
                "log": (row.error or "")[:2000], "done": True}
    return {"percent": 100, "stage": "done", "status": str(row.status), "done": True}


def _frames_after(tenant_id: int, skill_id: str, cursor: int
                  ) -> list[tuple[int, dict[str, Any]]]:
    rows = db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.tenant_id == tenant_id, SkillInstallEvent.skill_id == skill_id,
        SkillInstallEvent.id > cursor, SkillInstallEvent.kind.in_(FRAME_KINDS))
        .order_by(SkillInstallEvent.id))
    out = []
    for event in rows:
        frame = progress_frame(event)
        out.append((event.id, frame or {}))
    return out


def _last(tenant_id: int, row: InstalledSkill) -> SkillInstallEvent | None:
    """The last record of the run the row names (an older run's verdict is not news)."""
    query = select(SkillInstallEvent).where(
        SkillInstallEvent.tenant_id == tenant_id, SkillInstallEvent.skill_id == row.id,
        SkillInstallEvent.kind.in_(FRAME_KINDS))
    if row.install_message_id:
        query = query.where(SkillInstallEvent.run_id == row.install_message_id)
    for event in db.session.scalars(query.order_by(SkillInstallEvent.id.desc()).limit(5)):
        if progress_frame(event) is not None:
            return event
    return None


def _cursor(tenant_id: int, skill_id: str) -> int:
    last = db.session.scalar(select(SkillInstallEvent.id).where(
        SkillInstallEvent.tenant_id == tenant_id, SkillInstallEvent.skill_id == skill_id)
        .order_by(SkillInstallEvent.id.desc()).limit(1))
    return last or 0


def _wait(waiter: queue.SimpleQueue, seconds: float) -> None:
    try:
        waiter.get(timeout=max(seconds, 0.0))
        while True:  # several notices: one read serves them all
            waiter.get_nowait()
    except queue.Empty:
        pass


def _closing(tenant_id: int, skill_id: str, cursor: int, verdict: dict[str, Any]
             ) -> Iterator[str]:
    """The row's verdict, after the events its run committed before the row changed (read
    after the row, so none is lost between the two reads): also when the row changed just
    as the stream opened."""
    for _, frame in _frames_after(tenant_id, skill_id, cursor):
        if frame:
            yield sse(frame)
            if frame["done"]:
                return
    yield sse(verdict)


def follow_progress(tenant_id: int, row: InstalledSkill, waiter: queue.SimpleQueue
                    ) -> Iterator[str]:
    """Reference 7.3 steps 4-6 for a skill already resolved in the caller's workspace and a
    wake-up queue subscribed before this reads anything. A disconnect only closes this
    generator; the run never hears of it."""
    keepalive, max_seconds, poll = _settings()
    skill_id, percent = row.id, 0
    cursor = _cursor(tenant_id, skill_id)
    last = _last(tenant_id, row)
    if last is not None:
        frame = progress_frame(last)
        assert frame is not None
        percent, cursor = last.percent, max(cursor, last.id)
        # A verdict while the row is in flight is an earlier run's (a removal or reinstall
        # accepted, its run not started yet): old news, so follow the new run instead.
        if not (frame["done"] and row.status in IN_FLIGHT):
            yield sse(frame)
            if frame["done"]:
                return
    verdict = terminal_frame(_row(skill_id))
    if verdict is not None:
        yield from _closing(tenant_id, skill_id, cursor, verdict)
        return
    db.session.remove()
    start = time.monotonic()
    reread = start + keepalive
    while True:
        now = time.monotonic()
        _wait(waiter, min(poll, reread - now, start + max_seconds - now))
        for event_id, frame in _frames_after(tenant_id, skill_id, cursor):
            cursor = event_id
            if frame:
                percent = frame["percent"]
                yield sse(frame)
                if frame["done"]:
                    return
        now = time.monotonic()
        if now >= start + max_seconds:
            row_now = _row(skill_id)
            yield sse({"percent": percent, "stage": "detached",
                       "status": str(row_now.status) if row_now else "removed",
                       "log": DETACHED_LOG, "done": True})
            return
        if now >= reread:
            verdict = terminal_frame(_row(skill_id))
            if verdict is not None:
                yield from _closing(tenant_id, skill_id, cursor, verdict)
                return
            yield ": keep-alive\n\n"
            reread = now + keepalive
        db.session.remove()  # no pooled connection is held while waiting


# -- the transcript (reference 7.5, in the chat stream frame shape) ------------------

TRANSCRIPT_TYPES = {EventKind.progress: "progress", EventKind.command: "tool_call",
                    EventKind.output: "tool_result", EventKind.note: "note",
                    EventKind.error: "error"}


def transcript_run(row: InstalledSkill) -> str | None:
    """The run to replay; None means "not ready yet" (204). NotFound when there is none."""
    run_id = row.install_message_id
    if not run_id or not row.install_session_id:
        if row.status == InstallStatus.installing:
            return None
        raise NotFound("this skill has no install transcript")
    first = db.session.scalar(select(SkillInstallEvent.id).where(
        SkillInstallEvent.tenant_id == row.tenant_id, SkillInstallEvent.run_id == run_id)
        .limit(1))
    if first is None:
        if row.status in IN_FLIGHT:
            return None
        raise NotFound("this install's event log is no longer available")
    return run_id


def transcript_frame(event: SkillInstallEvent, session_id: str) -> dict[str, Any]:
    return {"id": event.run_id, "response_type": TRANSCRIPT_TYPES[event.kind],
            "content": event.message, "done": False, "session_id": session_id,
            "assistant_message_id": event.run_id,
            "data": {"seq": event.seq, "stage": event.stage, "percent": event.percent,
                     **({"status": event.status} if event.status else {})}}


def follow_transcript(tenant_id: int, skill_id: str, run_id: str, session_id: str,
                      waiter: queue.SimpleQueue) -> Iterator[str]:
    """Every event of the run from the first, tailed until the run's verdict, then a
    `complete` frame. A run that ended without a verdict event ends when its row does."""
    _, max_seconds, poll = _settings()
    seq, start = 0, time.monotonic()
    complete = {"id": run_id, "response_type": "complete", "content": "", "done": True,
                "session_id": session_id, "assistant_message_id": run_id, "data": {}}
    while True:
        events = list(db.session.scalars(select(SkillInstallEvent).where(
            SkillInstallEvent.tenant_id == tenant_id, SkillInstallEvent.run_id == run_id,
            SkillInstallEvent.seq > seq).order_by(SkillInstallEvent.seq)))
        for event in events:
            seq = event.seq
            yield sse(transcript_frame(event, session_id))
            if event.kind in (EventKind.progress, EventKind.error) \
                    and event.stage in TERMINAL_STAGES:
                yield sse(complete)
                return
        if not events:
            row = _row(skill_id)
            if row is None or row.install_message_id != run_id or row.status not in IN_FLIGHT:
                yield sse(complete)  # the run is over (or superseded) without a verdict event
                return
        if time.monotonic() - start >= max_seconds:
            return
        db.session.remove()
        _wait(waiter, min(poll, 1.0))


# -- a point-in-time view for the Skills page and the Manage drawer (reference 10.2) ----

# The stage list a page shows, in words ("" for `agent`: what its command does, plan.label).
INSTALL_STAGES = [("accepted", "Accepted"), ("sandbox_ready", "Sandbox started"),
                  ("seeding", "Copying files"), ("seeded", "Files copied"),
                  ("agent", ""), ("agent_done", "Commands finished"),
                  ("verified", "Checked"), ("done", "Done")]
REMOVAL_STAGES = [("accepted", "Accepted"), ("sandbox_ready", "Sandbox started"),
                  ("removed", "Files removed"), ("done", "Done")]


def current(tenant_id: int, row: InstalledSkill) -> dict[str, Any]:
    """The frame a stream would send first, plus the stage list with the current one
    marked and the stage in words (`sentence`); `done` is True once the run has a verdict
    (then no one needs to poll)."""
    last = _last(tenant_id, row)
    frame = progress_frame(last) if last is not None else None
    verdict = terminal_frame(row)
    if verdict is not None and (frame is None or not frame["done"]):
        frame = verdict
    frame = frame or {"percent": 0, "stage": "accepted", "done": False}
    removal = row.status == InstallStatus.removing
    command = None if removal else _last_command(tenant_id, row)
    frame["sentence"] = wording.sentence(
        frame["stage"], command if frame["stage"] == "agent" else frame.get("log"),
        frame.get("status"))
    stages = [(name, label or plan.label(command))
              for name, label in (REMOVAL_STAGES if removal else INSTALL_STAGES)]
    names = [name for name, _ in stages]
    stage = "agent" if frame["stage"] == "verify_note" else frame["stage"]
    if frame["stage"] == "failed":  # the list stops where the run did, that stage failed
        reached = _reached(tenant_id, row, names)
        at = names.index(reached) if reached else 0
        return {**frame, "stages": [{"name": name, "label": label,
                                     "state": "done" if i < at else "failed" if i == at
                                     else "todo"} for i, (name, label) in enumerate(stages)]}
    at = names.index(stage) if stage in names else (len(names) - 1 if frame["done"] else 0)
    return {**frame, "stages": [{"name": name, "label": label,
                                 "state": "done" if i < at or (i == at and stage == "done")
                                 else "current" if i == at else "todo"}
                                for i, (name, label) in enumerate(stages)]}


def _last_command(tenant_id: int, row: InstalledSkill) -> str | None:
    """The last command the row's current run started (what its `agent` stage runs)."""
    if not row.install_message_id:
        return None
    return db.session.scalar(select(SkillInstallEvent.message).where(
        SkillInstallEvent.tenant_id == tenant_id,
        SkillInstallEvent.run_id == row.install_message_id,
        SkillInstallEvent.kind == EventKind.command).order_by(SkillInstallEvent.seq.desc())
        .limit(1))


def _reached(tenant_id: int, row: InstalledSkill, names: list[str]) -> str | None:
    """The last listed stage the row's current run reported (the stage it failed in)."""
    if not row.install_message_id:
        return None
    stage = db.session.scalar(select(SkillInstallEvent.stage).where(
        SkillInstallEvent.tenant_id == tenant_id,
        SkillInstallEvent.run_id == row.install_message_id,
        SkillInstallEvent.stage.in_(names)).order_by(SkillInstallEvent.seq.desc()).limit(1))
    return stage


def reinstall_notes(events: list[SkillInstallEvent]) -> tuple[str, list[SkillInstallEvent]]:
    """The notes a reinstall was given (its run's first event, a note written before the
    run accepted anything) and the events after them; "" when it was given none."""
    if events and events[0].seq == 1 and events[0].kind == EventKind.note \
            and events[0].stage == "accepted":
        return events[0].message, events[1:]
    return "", events


def transcript_of(tenant_id: int, row: InstalledSkill) -> list[SkillInstallEvent]:
    """Every event of the row's current run, oldest first (empty before its first)."""
    if not row.install_message_id:
        return []
    return list(db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.tenant_id == tenant_id,
        SkillInstallEvent.run_id == row.install_message_id).order_by(SkillInstallEvent.seq)))
