"""A session's web terminal (issue 26, reference 9.3): a one-time ticket, then a
WebSocket that relays a shell in the session's sandbox.

The WebSocket carries no cookie or bearer token: its ticket is its credential, checked
(and used up) before the upgrade, so a refused ticket is an ordinary 401 envelope. After
the upgrade, binary frames are keystrokes one way and output the other; text frames are
JSON control messages: `{"type": "resize", "cols", "rows"}` from the client, `{"type":
"ready", "idle_sec"}` and, last, `{"type": "closed", "reason", "message"}` from us.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time

from flask import Response, g, request
from simple_websocket import ConnectionClosed, Server
from wsproto.events import CloseConnection, Ping
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError

from app.api import bp
from app.api._core import Out, doc, ok
from app.auth.guards import guard, public
from app.models import Role
from app.services.sessions import lifecycle as sessions
from app.services.sessions import terminals
from app.tenancy import current_tenant

MESSAGE_MAX = 64 * 1024  # one frame from the client: a paste, or a resize
PING_SEC = 20  # keeps the socket busier than the server's 30 s read timeout
CLOSE_WAIT_SEC = 1.0  # for the client's answer to our close frame


class TicketOut(Out):
    ticket: str
    url: str
    expires_in: int
    idle_sec: int


@bp.post("/sessions/<uuid:session_id>/terminal-tickets")
@guard(Role.viewer)
@doc(f"A one-time ticket for a terminal in your session's sandbox, valid "
     f"{terminals.TICKET_SEC} s; open `url` as a WebSocket. 409 `sandbox_not_bound` before "
     f"the session has a sandbox, `sandbox_gone` after it went; 429 past the session's "
     "terminal limit (5 by default) or the member's or workspace's", response=TicketOut, status=201,
     errors=(403, 404, 409, 423, 429))
def issue_terminal_ticket(session_id):
    own = sessions.get_session(current_tenant(), g.principal.user, str(session_id))
    ticket = terminals.issue_ticket(current_tenant(), g.principal.user, own, login_sid=None)
    return ok(ticket.answer(), 201)


@bp.get("/sessions/<uuid:session_id>/terminal", websocket=True)  # only WebSocket requests
@public  # the ticket is the credential
@doc("The terminal's WebSocket (query `ticket`, optional `cols` and `rows`): binary "
     "frames carry keystrokes and output, text frames JSON control messages",
     errors=(400, 401))
def terminal_socket(session_id):
    who = terminals.redeem(str(session_id), request.args.get("ticket"))
    ws = InlineServer.accept(request.environ, ping_interval=PING_SEC,
                             max_message_size=MESSAGE_MAX)
    try:
        closing = terminals.relay(ws, who, request.args.get("cols"), request.args.get("rows"))
        ws.send(json.dumps({"type": "closed", "reason": closing.reason,
                            "message": closing.message}))
        ws.close(closing.code, closing.message[:120])
    except ConnectionClosed:
        pass
    return _after_websocket(ws)


class _NoThread:
    """simple_websocket's `thread_class` for InlineServer: no reader thread is started."""

    def __init__(self, target=None) -> None:
        self.name = "inline"

    def start(self) -> None:
        pass


class InlineServer(Server):
    """simple_websocket's server, its socket read on the caller's thread in `receive`.

    The library's own server reads on a thread of its own and hands each message over
    with an Event, so a keystroke woke two threads in the server before it reached the
    shell, and every terminal held one more thread (bench/bench_terminal.py: the median
    echo 0.93 -> 0.86 ms beside a raw exec's 0.41). Here the relay's thread reads the
    frame and writes it on at once; frames, pings, pongs and the close handshake are the
    library's as before.
    """

    def __init__(self, environ, **kwargs) -> None:
        super().__init__(environ, **{**kwargs, "thread_class": _NoThread})
        self._ping_at = time.monotonic() + (self.ping_interval or 0)

    def receive(self, timeout: float | None = None) -> bytes | str | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.connected and not self.input_buffer:
            now = time.monotonic()
            if self.ping_interval and now >= self._ping_at:
                self._ping()
                continue
            waits = [t - now for t in (deadline, self._ping_at if self.ping_interval else None)
                     if t is not None]
            ready, _, _ = select.select([self.sock], [], [], max(0.0, min(waits))
                                        if waits else None)
            if ready:
                self._read()
            elif deadline is not None and time.monotonic() >= deadline:
                return None
        if self.input_buffer:
            return self.input_buffer.pop(0)
        raise ConnectionClosed(self.close_reason, self.close_message)

    def close(self, reason=None, message=None) -> None:
        """Send the close frame, then read until the client answers it (or hangs up, or a
        second passes), so the socket the server then closes holds nothing unread: a
        reset could make the client drop our last frames."""
        super().close(reason, message)
        deadline = time.monotonic() + CLOSE_WAIT_SEC
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return
            try:
                data = self.sock.recv(self.receive_bytes)
            except OSError:
                return
            if not data:
                return
            with contextlib.suppress(LocalProtocolError):
                self.ws.receive_data(data)
                if any(isinstance(event, CloseConnection) for event in self.ws.events()):
                    return

    def _read(self) -> None:
        """One read of the socket into messages (what the library's thread did in a loop);
        a hang-up or a broken frame ends the connection."""
        try:
            data = self.sock.recv(self.receive_bytes)
            if not data:
                raise ConnectionResetError
            self.ws.receive_data(data)
            self.connected = self._handle_events()
        except (OSError, LocalProtocolError):
            self.connected = False

    def _ping(self) -> None:
        if not self.pong_received:  # the last ping went unanswered for a whole interval
            self.close(CloseReason.POLICY_VIOLATION, "Ping/Pong timeout")
            return
        self.pong_received = False
        self._ping_at = time.monotonic() + self.ping_interval
        with contextlib.suppress(OSError):
            self.sock.send(self.ws.send(Ping()))


def _after_websocket(ws: Server) -> Response:
    """What the server is handed once the socket closed: the WSGI servers each want
    their own sign that the connection was taken over, so that none writes an HTTP answer
    onto the closed WebSocket (a browser reports that as an invalid frame)."""

    class Done(Response):
        def __call__(self, *args, **kwargs):
            if ws.mode == "gunicorn":
                raise StopIteration()
            if ws.mode == "werkzeug":  # a dropped connection: it writes nothing more,
                with contextlib.suppress(OSError):  # and reads no next request from it
                    ws.sock.shutdown(socket.SHUT_RDWR)
                raise ConnectionError()
            return []

    return Done()

