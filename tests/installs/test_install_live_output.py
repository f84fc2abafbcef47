"""Issue 27 item 2: an installer's output reaches the transcript line by line while it
runs (in batches), not all at once when it exits; in the API's transcript stream too, in
the reference's frame shape. Every line is treated as hostile: secrets masked, NUL and
terminal escapes dropped, an endless line cut."""

from __future__ import annotations

import time

from sqlalchemy import select

from app.extensions import db
from app.models import EventKind, InstalledSkill, InstallStatus, SkillInstallEvent
from tests.installs.conftest import docker_config, install_zip, skill_zip, wait_for
from tests.streams.conftest import _OPEN, read_stream, token, url_of
from tests.streams.conftest import serve as serve_fixture

serve = serve_fixture  # fixture
SECRET = "live-canary-secret-6b21"
SLOW_SH = b"""#!/bin/sh
echo "fetching the first part"
printf 'token %s\\n' "$LIVE_TOKEN"
printf 'nul\\000byte\\n'
printf '\\033[32mgreen\\033[0m\\n'
printf 'progress 10%%\\rprogress 100%%\\n'
head -c 20000 /dev/zero | tr '\\0' 'x'; echo
sleep 5
echo "second part done"
"""


def _outputs(skill_id: str) -> list[SkillInstallEvent]:
    db.session.remove()
    return list(db.session.scalars(select(SkillInstallEvent).where(
        SkillInstallEvent.skill_id == skill_id, SkillInstallEvent.kind == EventKind.output)
        .order_by(SkillInstallEvent.seq)))


def test_output_is_in_the_transcript_while_the_command_still_runs(world, app, serve):
    admin = world["admin"]
    config = docker_config(admin, env_vars={"LIVE_TOKEN": SECRET})
    skill_id = install_zip(admin, config["id"], skill_zip("slowly", {"install.sh": SLOW_SH})
                           ).json["data"]["skill_id"]
    deadline = time.monotonic() + 60
    seen: list[SkillInstallEvent] = []
    while time.monotonic() < deadline:
        seen = _outputs(skill_id)
        if any("fetching the first part" in e.message for e in seen):
            break
        time.sleep(0.1)
    text = "\n".join(e.message for e in seen)
    assert "fetching the first part" in text, "no output before the command ended"
    assert "second part done" not in text and "[exit code" not in text
    assert db.session.get(InstalledSkill, skill_id).status == InstallStatus.installing

    # The API's transcript, opened while the command runs, gets the rest as it comes.
    row = db.session.get(InstalledSkill, skill_id)
    a = world["a"]
    stream = read_stream(serve(app), url_of(row, "transcript"), token(app, a.admin, a.tenant))
    try:
        assert wait_for(skill_id).status == "ready"
        assert stream.ended.wait(15)
    finally:
        stream.hang_up()
        _OPEN.remove(stream)
    results = [f for f in stream.frames if f["response_type"] == "tool_result"]
    assert len(results) >= 3  # batches, then the exit code
    assert all(set(f) == {"id", "response_type", "content", "done", "session_id",
                          "assistant_message_id", "data"} for f in results)
    assert results[-1]["content"] == "[exit code 0]"
    first_part = next(i for i, f in enumerate(results) if "fetching" in f["content"])
    second_part = next(i for i, f in enumerate(results) if "second part" in f["content"])
    assert first_part < second_part

    stored = "\n".join(e.message for e in _outputs(skill_id))
    assert SECRET not in stored and "token ***" in stored
    assert "\x00" not in stored
    assert "nulbyte" in stored  # NUL dropped, the line kept
    assert "\x1b" not in stored and "green" in stored
    assert "progress 100%" in stored and "progress 10%\r" not in stored
    longest = max(len(line) for line in stored.splitlines())
    assert longest < 2100 and "characters cut" in stored
    assert stored.count("second part done") == 1  # streamed once, not again at the end


def test_a_secret_split_across_chunks_is_masked_and_a_cut_line_drops_its_rest(two_tenants):
    """The exec hands over chunks wherever the pipe split them: lines are put together
    before they are masked, and a line past its cap keeps its start only."""
    from flask import current_app

    from app.backends.base import ExecResult
    from app.services.skills.installs.events import EventLog
    from app.services.skills.installs.output import PARTIAL_MAX, LiveOutput
    from tests.streams.conftest import make_skill

    a, _ = two_tenants
    row = make_skill(a.tenant)
    pem = ("-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIB\n"
           "-----END KEY-----")
    events = EventLog(row.tenant_id, row.id, row.install_message_id, [SECRET, pem])
    with LiveOutput(current_app._get_current_object(), events) as live:
        live.add(1, b"key=" + SECRET[:9].encode())
        live.add(1, SECRET[9:].encode() + b" ok\npartial ")
        live.add(2, b"on stderr\n" + pem.encode()[:30])
        live.add(2, pem.encode()[30:] + b"\n")
        live.add(1, b"y" * (PARTIAL_MAX + 10))
        live.add(1, b"yyyy dropped\nafter the long line\nno newline at the end")
    live.finish(ExecResult(stdout="", stderr="", exit_code=3, duration_ms=1))
    text = "\n".join(e.message for e in _outputs(row.id))
    assert SECRET not in text and "key=*** ok" in text
    assert "on stderr" in text and "dropped" not in text
    assert "MIIEvQ" not in text and "AQEFAA" not in text
    assert "after the long line" in text and "no newline at the end" in text
    assert text.endswith("[exit code 3]")
