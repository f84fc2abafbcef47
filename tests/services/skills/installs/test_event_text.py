"""Install transcripts keep what an install printed, whatever bytes it printed (issue 22
item 6): a NUL byte, which PostgreSQL text cannot hold, lost the event and failed the run."""

from __future__ import annotations

from sqlalchemy import select

from app.extensions import db
from app.models import SkillInstallEvent
from app.services.skills.installs.events import EventLog
from tests.streams.conftest import make_skill


def test_a_nul_in_install_output_is_stored_as_the_replacement_character(two_tenants):
    a, _ = two_tenants
    row = make_skill(a.tenant)
    events = EventLog(row.tenant_id, row.id, row.install_message_id)
    events.output("built\x00tool")
    events.note("notes\x00too", stage="accepted")
    stored = db.session.scalars(select(SkillInstallEvent.message).where(
        SkillInstallEvent.run_id == row.install_message_id)
        .order_by(SkillInstallEvent.seq)).all()
    assert stored == ["built\ufffdtool", "notes\ufffdtoo"]
