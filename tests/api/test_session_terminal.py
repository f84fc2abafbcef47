"""Issue 26 item 1: a session's web terminal through the API. One-time tickets (reuse,
expiry, another member's, another session's, after sign-out, removal or a password
change: all refused), and over a real WebSocket on loopback a shell in the session's
Docker sandbox: round trip, resize, the limits, idle disconnect and the session's end."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select, update
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from app.api import terminals as terminals_api
from app.extensions import db
from app.models import (
    AuditEvent,
    BindingState,
    LoginSession,
    Membership,
    SandboxSession,
    TerminalTicket,
)
from app.models.types import utcnow
from app.services import audit, capacity
from app.services.sandboxes import configs as service
from app.services.sessions import binding, terminals
from app.services.sessions import lifecycle as sessions
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.conftest import csrf_token
from tests.factories import config_doc

UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}


def _config(group, image=BASE_IMAGE):
    return service.create_config(group.tenant, audit.SystemActor("tests"), "Local", "",
                                 config_doc("docker", {"image": image, "network_mode": "none"}))


@pytest.fixture
def paper(app, two_tenants):
    """A session marked bound to a sandbox that does not exist: enough for tickets."""
    a, b = two_tenants
    session = sessions.create_session(a.tenant, a.contributor, _config(a).id, "paper")
    session.binding_state, session.sandbox_id = BindingState.bound, "not-a-container"
    db.session.commit()
    return a, b, session


@pytest.fixture
def world(app, two_tenants):
    require_docker()
    a, b = two_tenants
    session = sessions.create_session(a.tenant, a.contributor, _config(a).id, "work")
    assert sessions.exec_command(a.tenant, a.contributor, session, "true").exit_code == 0
    yield a, b, session
    sessions.destroy_sandboxes(session)


def ticket_url(session) -> str:
    return f"/api/v1/sessions/{session.id}/terminal-tickets"


def new_ticket(api, session) -> dict:
    answer = api.post(ticket_url(session))
    assert answer.status_code == 201, answer.json
    return answer.json["data"]


def knock(client, session, token):
    """The WebSocket's handshake request; refusals answer before any upgrade."""
    return client.get(f"/api/v1/sessions/{session.id}/terminal",
                      query_string={"ticket": token}, headers=UPGRADE)


class Term:
    """A WebSocket client of the terminal on its own socket (wsproto, no thread), as a
    browser is: frames that arrive with the handshake's answer are kept (simple_websocket's
    client drops them when the server closes right after, as a refusal does)."""

    def __init__(self, base: str, url: str):
        parts = urlsplit(f"{base}{url}&cols=100&rows=30")
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host=parts.netloc,
                                               target=f"{parts.path}?{parts.query}")))
        self.seen, self.control = b"", []
        self.accepted, self.open = False, True
        deadline = time.monotonic() + 10
        while not self.accepted:
            assert self.open and time.monotonic() < deadline, "the handshake was not answered"
            self._read(0.5)

    def _read(self, timeout: float) -> None:
        if not self.open:
            return
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return
        except OSError:
            data = b""
        if not data:
            self.open = False
            return
        self.ws.receive_data(data)
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                self.accepted = True
            elif isinstance(event, RejectConnection):
                raise AssertionError(f"refused with {event.status_code}")
            elif isinstance(event, BytesMessage):
                self.seen += event.data
            elif isinstance(event, TextMessage):
                self.control.append(json.loads(event.data))
            elif isinstance(event, Ping):
                self.sock.sendall(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                with contextlib.suppress(OSError, LocalProtocolError):
                    self.sock.sendall(self.ws.send(event.response()))
                self.open = False

    def until(self, text: bytes, seconds: float = 10) -> bytes:
        deadline = time.monotonic() + seconds
        while text not in self.seen:
            assert time.monotonic() < deadline, f"never saw {text!r}: {self.seen[-300:]!r}"
            assert self.open, f"closed before {text!r}: {self.control}"
            self._read(0.5)
        return self.seen

    def closed(self, seconds: float = 15) -> dict:
        """The closing message (the socket then closes)."""
        deadline = time.monotonic() + seconds
        while self.open and not any(c.get("type") == "closed" for c in self.control):
            assert time.monotonic() < deadline, f"not closed: {self.control}"
            self._read(0.5)
        return next(c for c in self.control if c.get("type") == "closed")

    def type(self, text: str) -> None:
        self.sock.sendall(self.ws.send(Message(data=text.encode())))

    def send_json(self, control: dict) -> None:
        self.sock.sendall(self.ws.send(Message(data=json.dumps(control))))

    def close(self) -> None:
        if self.open:
            with contextlib.suppress(OSError, LocalProtocolError):
                self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        self.sock.close()


def open_rows(session) -> int:
    """The session's terminals as every process counts them."""
    return capacity.used(capacity.Use("terminal", session.tenant_id, "", session.id),
                         "session")


def test_a_terminal_round_trip_in_the_sessions_sandbox(world, bearer, live_server):
    a, _, session = world
    member = bearer(a.contributor, a.tenant)
    # The member's own config-wide variable reaches their shell as it reaches a command.
    assert member.put("/api/v1/me/env-vars/sandbox", json={
        "sandbox_config_id": session.sandbox_config_id, "name": "MY_WIDE",
        "value": "members-own"}).status_code == 200
    answer = new_ticket(member, session)
    assert answer["expires_in"] == 120 and answer["idle_sec"] == 900
    assert answer["url"] == f"/api/v1/sessions/{session.id}/terminal?ticket={answer['ticket']}"

    term = Term(live_server, answer["url"])
    try:
        term.until(b"$ ")
        assert term.control[0] == {"type": "ready", "idle_sec": 900}
        term.type("echo hi-$((6*7)) $(id -un) $(pwd) $MY_WIDE; stty size\r")
        term.until(b"hi-42 sandbox /workspace members-own")
        term.until(b"30 100")
        term.send_json({"type": "resize", "cols": 132, "rows": 40})
        term.type("stty size\r")
        term.until(b"40 132")
        assert open_rows(session) == 1
        term.type("exit\r")
        assert term.closed()["reason"] == "ended"
    finally:
        term.close()
    deadline = time.monotonic() + 5
    while open_rows(session):
        assert time.monotonic() < deadline, "the open terminal's row outlived it"
        time.sleep(0.1)
    events = db.session.scalars(select(AuditEvent).where(
        AuditEvent.action == "session.terminal_opened")).all()
    assert [(e.object_id, e.actor_label) for e in events] == [(session.id, a.contributor.email)]
    assert "echo" not in json.dumps([e.data for e in events])  # input is never stored


def test_a_ticket_opens_one_terminal_once_within_its_time(paper, bearer, client):
    a, _, session = paper
    api = bearer(a.contributor, a.tenant)

    used = new_ticket(api, session)["ticket"]
    terminals.redeem(session.id, used)
    again = knock(client, session, used)
    assert again.status_code == 401 and again.json["error"]["code"] == "unauthorized"
    assert "one terminal" in again.json["error"]["message"]

    late = new_ticket(api, session)["ticket"]
    db.session.execute(update(TerminalTicket).values(expires_at=utcnow() - timedelta(seconds=1)))
    db.session.commit()
    assert knock(client, session, late).status_code == 401

    for token in ("", "x" * 40, "short"):
        assert knock(client, session, token).status_code == 401
    plain = client.get(f"/api/v1/sessions/{session.id}/terminal",
                       query_string={"ticket": new_ticket(api, session)["ticket"]})
    assert plain.status_code == 400  # not a WebSocket: nothing is used up


def test_a_ticket_works_only_for_its_session_and_member(paper, bearer, client):
    a, b, session = paper
    other = sessions.create_session(a.tenant, a.viewer, session.sandbox_config_id, "mine")
    other.binding_state, other.sandbox_id = BindingState.bound, "not-a-container"
    db.session.commit()

    # A viewer asks for a ticket to someone else's session: not theirs to see.
    assert bearer(a.viewer, a.tenant).post(ticket_url(session)).status_code == 404
    assert bearer(b.owner, b.tenant).post(ticket_url(session)).status_code == 404
    # A ticket of one session presented on another (the viewer's own) opens nothing.
    token = new_ticket(bearer(a.contributor, a.tenant), session)["ticket"]
    assert knock(client, other, token).status_code == 401


@pytest.mark.parametrize("revoke", ["sign_out", "removed", "password_changed"])
def test_a_ticket_dies_with_its_members_access(paper, login_as, client, revoke):
    a, _, session = paper
    browser = login_as(a.contributor, a.tenant)
    answer = browser.post(f"/playground/{session.id}/terminal/tickets",
                          headers={"X-CSRFToken": csrf_token(browser, "/playground")})
    assert answer.status_code == 201, answer.get_json()
    token = answer.get_json()["ticket"]

    if revoke == "sign_out":
        db.session.execute(db.delete(LoginSession).where(
            LoginSession.user_id == a.contributor.id))
    elif revoke == "removed":
        db.session.execute(db.delete(Membership).where(
            Membership.user_id == a.contributor.id, Membership.tenant_id == a.tenant.id))
    else:
        a.contributor.session_version += 1
    db.session.commit()
    assert knock(client, session, token).status_code == 401


def test_no_ticket_before_the_session_has_a_sandbox(app, two_tenants, bearer):
    a, _ = two_tenants
    session = sessions.create_session(a.tenant, a.contributor, _config(a).id, "new")
    answer = bearer(a.contributor, a.tenant).post(ticket_url(session))
    assert answer.status_code == 409
    assert answer.json["error"]["code"] == "sandbox_not_bound"


def test_a_session_has_at_most_five_terminals_and_a_process_its_cap(
        world, bearer, live_server, app, monkeypatch):
    a, _, session = world
    api = bearer(a.contributor, a.tenant)
    opened = [Term(live_server, new_ticket(api, session)["url"]) for _ in range(5)]
    try:
        for term in opened:
            term.until(b"$ ")
        sixth = api.post(ticket_url(session))
        assert sixth.status_code == 429
        assert sixth.json["error"]["code"] == "quota_exceeded"
        assert "at most 5 terminals" in sixth.json["error"]["message"]
        opened.pop().close()
        deadline = time.monotonic() + 5
        while open_rows(session) > 4:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # The process's own cap: a terminal past it is told why and closed.
        monkeypatch.setitem(app.config, "TERMINALS_MAX", 4)
        refused = Term(live_server, new_ticket(api, session)["url"])
        assert refused.closed()["reason"] == "unavailable"
    finally:
        for term in opened:
            term.close()


def test_idle_terminals_and_ended_sessions_close_with_a_sentence(
        world, bearer, live_server, monkeypatch):
    a, _, session = world
    api = bearer(a.contributor, a.tenant)
    monkeypatch.setattr(terminals, "IDLE_DEFAULT_SEC", 2)
    idle = Term(live_server, new_ticket(api, session)["url"])
    idle.until(b"$ ")
    closed = idle.closed(seconds=10)
    assert closed["reason"] == "idle" and "2 seconds without input" in closed["message"]

    monkeypatch.setattr(terminals, "IDLE_DEFAULT_SEC", 60)
    monkeypatch.setattr(terminals, "HEARTBEAT_SEC", 0.3)
    live = Term(live_server, new_ticket(api, session)["url"])
    live.until(b"$ ")
    # While it is open the session is in use: its sandbox is not paused as idle.
    long_ago = utcnow() - timedelta(days=1)
    db.session.execute(update(SandboxSession).where(SandboxSession.id == session.id)
                       .values(last_used_at=long_ago))
    db.session.commit()
    deadline = time.monotonic() + 5  # the next heartbeat (at most a poll's wait late)
    while db.session.get(SandboxSession, session.id, populate_existing=True)\
            .last_used_at <= long_ago:
        assert time.monotonic() < deadline, "the open terminal did not mark its session used"
        time.sleep(0.2)
    assert binding.pause_idle() == 0
    sessions.delete_session(a.tenant, a.contributor, db.session.merge(session))
    assert live.closed(seconds=10)["reason"] in ("session_ended", "ended")


def test_the_relay_reads_its_websocket_on_its_own_thread(world, bearer, live_server):
    """No reader thread per terminal: a keystroke goes from the socket to the shell on the
    relay's thread (a hand-over between threads cost a wake-up per frame)."""
    a, _, session = world
    term = Term(live_server, new_ticket(bearer(a.contributor, a.tenant), session)["url"])
    try:
        term.until(b"$ ")
        server_readers = [t.name for t in threading.enumerate()
                          if "simple_websocket" in t.name]
        assert server_readers == []
        term.type("echo still-$((2*21))\r")
        term.until(b"still-42")
    finally:
        term.close()


def test_a_broken_frame_ends_the_terminal_and_frees_its_place(world, bearer, live_server):
    a, _, session = world
    url = urlsplit(live_server + new_ticket(bearer(a.contributor, a.tenant), session)["url"])
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host=url.netloc, target=f"{url.path}?{url.query}")))
    deadline = time.monotonic() + 10
    while open_rows(session) == 0:  # the relay is up
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sock.sendall(b"\x82\x01a")  # a client's frame must be masked
    try:
        while sock.recv(65536):  # the server closes the connection
            assert time.monotonic() < deadline, "still open"
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    while open_rows(session):
        assert time.monotonic() < deadline, "the open terminal's row outlived it"
        time.sleep(0.1)


def test_pings_go_out_and_an_unanswered_one_closes_the_terminal(
        world, bearer, live_server, monkeypatch):
    a, _, session = world
    monkeypatch.setattr(terminals_api, "PING_SEC", 0.3)
    url = urlsplit(live_server + new_ticket(bearer(a.contributor, a.tenant), session)["url"])
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    ws = WSConnection(ConnectionType.CLIENT)
    sock.sendall(ws.send(Request(host=url.netloc, target=f"{url.path}?{url.query}")))
    pings, closed = 0, None
    deadline = time.monotonic() + 10
    try:
        while closed is None:  # never answers a ping
            assert time.monotonic() < deadline, f"not closed after {pings} pings"
            data = sock.recv(65536)
            ws.receive_data(data or None)
            for event in ws.events():
                pings += isinstance(event, Ping)
                if isinstance(event, CloseConnection):
                    closed = event
                    break
    finally:
        sock.close()
    assert pings >= 1 and closed.code == 1008
