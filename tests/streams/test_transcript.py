"""GET .../transcript (reference 7.5, decisions 8): 204 before the first event, 404 when
there is none, every command, output and note in the chat frame shape, `complete` last;
a run still going is tailed."""

from __future__ import annotations

import time

import httpx

from app.extensions import db
from app.models import InstallStatus
from tests.streams.conftest import make_skill, read_stream, token, url_of
from tests.streams.test_install_events import log_for


def test_204_before_the_first_event_and_404_when_there_is_none(app, two_tenants, serve):
    a, _ = two_tenants
    base, headers = serve(app), token(app, a.admin, a.tenant)
    row = make_skill(a.tenant)
    assert httpx.get(base + url_of(row, "transcript"), headers=headers).status_code == 204
    row.install_session_id = row.install_message_id = None
    db.session.commit()
    assert httpx.get(base + url_of(row, "transcript"), headers=headers).status_code == 204
    row.status = InstallStatus.ready
    db.session.commit()
    missing = httpx.get(base + url_of(row, "transcript"), headers=headers)
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "this skill has no install transcript"


def test_a_running_install_is_tailed_until_complete(app, two_tenants, serve, monkeypatch):
    a, _ = two_tenants
    secret = "sk-config-canary-3f9a"
    row = make_skill(a.tenant, secret=secret)
    events = log_for(row)
    events.secrets = [secret]  # what the pipeline passes: the config's known secrets
    events.emit("accepted", 10)
    events.command("python3 -m venv .venv && .venv/bin/pip install -r requirements.txt", 1)
    stream = read_stream(serve(app), url_of(row, "transcript"), token(app, a.admin, a.tenant))
    assert [f["response_type"] for f in stream.wait_frames(2)] == ["progress", "tool_call"]
    events.output(f"Collecting tinypkg\nSuccessfully installed tinypkg-1.0 {secret}\n"
                  "[exit code 0]")
    events.note("declared environment variables: API_TOKEN")
    time.sleep(0.3)
    assert not stream.ended.is_set()
    row.status = InstallStatus.ready
    db.session.commit()
    events.emit("done", 100, status="ready")
    assert stream.ended.wait(5)
    types = [f["response_type"] for f in stream.frames]
    assert types == ["progress", "tool_call", "tool_result", "note", "progress", "complete"]
    result = stream.frames[2]
    assert "Successfully installed tinypkg-1.0" in result["content"]
    assert secret not in str(stream.frames)
    assert result["id"] == result["assistant_message_id"] == row.install_message_id
    assert result["session_id"] == row.install_session_id and result["done"] is False
    assert stream.frames[-1]["done"] is True
    # Read again later: the same transcript, from the first event (it never expires).
    again = read_stream(serve(app), url_of(row, "transcript"), token(app, a.admin, a.tenant))
    assert again.ended.wait(5)
    assert [f["content"] for f in again.frames] == [f["content"] for f in stream.frames]


def test_a_run_that_died_without_a_verdict_event_still_completes(app, two_tenants, serve):
    a, _ = two_tenants
    row = make_skill(a.tenant)
    log_for(row).command("sleep 300", 1)
    stream = read_stream(serve(app), url_of(row, "transcript"), token(app, a.admin, a.tenant))
    stream.wait_frames(1)
    row.status, row.error = InstallStatus.failed, "the install worker stopped"
    db.session.commit()
    assert stream.ended.wait(5)
    assert stream.frames[-1]["response_type"] == "complete"
