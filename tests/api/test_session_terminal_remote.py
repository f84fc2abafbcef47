"""The web terminal on E2B and Cube, end to end: a ticket, the WebSocket, and a shell in
the session's sandbox through the real SDK's PTY against the local fake provider, with
the environment a command gets."""

from __future__ import annotations

import time

import pytest

from app.services.sessions import terminals
from tests.api.test_session_terminal import Term, new_ticket
from tests.api.test_sessions_remote import provider, remote_config  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("private_endpoints")


def test_a_terminal_round_trip_on_a_remote_provider(two_tenants, bearer, provider,  # noqa: F811
                                                     live_server, monkeypatch):
    monkeypatch.setattr(terminals, "KEEPALIVE_SEC", 0.5)
    kind, server = provider
    a, _ = two_tenants
    config = remote_config(bearer(a.admin, a.tenant), kind, server,
                           env_vars={"FROM_CONFIG": "yes"})["data"]
    member = bearer(a.contributor, a.tenant)
    session_id = member.post("/api/v1/sessions",
                             json={"sandbox_config_id": config["id"]}).json["data"]["id"]
    assert member.post(f"/api/v1/sessions/{session_id}/exec",
                       json={"command": "true"}).status_code == 200

    class Session:
        id = session_id

    term = Term(live_server, new_ticket(member, Session)["url"])
    try:
        term.until(b"$ ", seconds=20)
        term.type("echo hi-$((6*7)) $(id -un) $(pwd) $FROM_CONFIG; stty size\r")
        term.until(b"hi-42 sandbox /workspace yes")
        term.until(b"30 100")
        # The provider's own timeout is pushed back while the terminal is open.
        deadline = time.monotonic() + 10
        while not any(c.path.endswith("/timeout") for c in server.calls):
            assert time.monotonic() < deadline, "the sandbox's timeout was never refreshed"
            term.type("true\r")
            time.sleep(0.3)
        term.type("exit\r")
        assert term.closed(seconds=20)["reason"] == "ended"
    finally:
        term.close()
