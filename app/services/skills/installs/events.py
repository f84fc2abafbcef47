"""Durable progress and transcript events of one install or removal run.

Every stage change (reference 7.3) and every transcript entry (command, output, note,
error) is a row, committed as it happens, so a page that polls or a stream that follows
never loses one and the transcript never expires (decisions 8). Text is capped and every
known secret value of the config is masked before it is stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from app.extensions import db
from app.models import EventKind, SkillInstallEvent
from app.security.redaction import MASK
from app.services import wakeups

MESSAGE_MAX = 16 * 1024
SECRET_MIN = 4  # shorter values would mask ordinary words; they are not worth hiding
SECRET_LINE_MIN = 8  # a line of a multi-line secret, masked on its own from this length
TERMINAL = ("done", "failed")


def agent_percent(steps: int) -> int:
    """Reference 7.3: 35 + 44 * (1 - e^(-k/12)) after k installer commands."""
    return 35 + int(44 * (1 - math.exp(-steps / 12)))


def cap(text: str, limit: int = MESSAGE_MAX) -> str:
    """Head and tail of long output: the start says what ran, the end why it stopped."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters omitted ...]\n{text[-half:]}"


class EventLog:
    """Appends the events of run `run_id` of skill `skill_id`."""

    def __init__(self, tenant_id: int, skill_id: str, run_id: str,
                 secrets: Iterable[str] = (),
                 on_progress: Callable[[int, str], None] | None = None):
        self.tenant_id, self.skill_id, self.run_id = tenant_id, skill_id, run_id
        values = {s for s in secrets if isinstance(s, str)}
        # Output is stored line by line as it is printed (output.py): each line of a
        # multi-line secret (a PEM key) is masked on its own too.
        lines = {line.strip() for value in values if "\n" in value
                 for line in value.splitlines() if len(line.strip()) >= SECRET_LINE_MIN}
        self.secrets = sorted({s for s in values | lines if len(s) >= SECRET_MIN},
                              key=len, reverse=True)
        self.on_progress = on_progress
        self.percent = 0
        self.stage = "accepted"

    def mask(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return text

    def emit(self, stage: str, percent: int | None = None, *, kind: EventKind = EventKind.progress,
             message: str = "", status: str | None = None) -> None:
        """Store one event and commit it (with whatever the run changed before it)."""
        self.stage = stage
        if percent is not None:
            self.percent = percent
        text = cap(self.mask(message))
        db.session.commit()  # what the run changed before the event is durable first
        for attempt in range(3):  # a stop request may append to the same run concurrently
            seq = (db.session.scalar(select(func.max(SkillInstallEvent.seq)).where(
                SkillInstallEvent.run_id == self.run_id)) or 0) + 1
            db.session.add(SkillInstallEvent(
                tenant_id=self.tenant_id, skill_id=self.skill_id, run_id=self.run_id, seq=seq,
                stage=stage, percent=self.percent, kind=kind, status=status, message=text))
            try:
                db.session.commit()
                break
            except IntegrityError:
                db.session.rollback()
                if attempt == 2:
                    raise
        wakeups.publish(self.skill_id)  # after the commit: a woken stream finds the row
        if kind == EventKind.progress and self.on_progress is not None:
            self.on_progress(self.percent, stage)

    def note(self, message: str, stage: str | None = None) -> None:
        self.emit(stage or self.stage, kind=EventKind.note, message=message)

    def command(self, command: str, steps: int) -> None:
        self.emit("agent", agent_percent(steps), kind=EventKind.command, message=command)

    def output(self, text: str) -> None:
        self.emit(self.stage, kind=EventKind.output, message=text)

    def failed(self, message: str, status: str = "failed") -> None:
        self.emit("failed", 100, kind=EventKind.error, message=message, status=status)


def events_of(tenant_id: int, skill_id: str, run_id: str | None = None,
              after: int = 0) -> list[SkillInstallEvent]:
    """The events of one run (the skill's latest when `run_id` is None), oldest first."""
    query = select(SkillInstallEvent).where(SkillInstallEvent.tenant_id == tenant_id,
                                            SkillInstallEvent.skill_id == skill_id)
    if run_id is not None:
        query = query.where(SkillInstallEvent.run_id == run_id, SkillInstallEvent.seq > after)
    return list(db.session.scalars(query.order_by(SkillInstallEvent.id)))
