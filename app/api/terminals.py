"""A session's web terminal (issue 26, reference 9.3): a one-time ticket, then a
WebSocket that relays a shell in the session's sandbox.

The WebSocket carries no cookie or bearer token: its ticket is its credential, checked
(and used up) before the upgrade, so a refused ticket is an ordinary 401 envelope. After
the upgrade, binary frames are keystrokes one way and output the other; text frames are
JSON control messages: `{"type": "resize", "cols", "rows"}` from the client, `{"type":
"ready", "idle_sec"}` and, last, `{"type": "closed", "reason", "message"}` from us.
"""

from __future__ import annotations

import json

from flask import Response, g, request
from simple_websocket import ConnectionClosed, Server

from app.api import bp
from app.api._core import Out, doc, ok
from app.auth.guards import guard, public
from app.models import Role
from app.services.sessions import lifecycle as sessions
from app.services.sessions import terminals
from app.tenancy import current_tenant

MESSAGE_MAX = 64 * 1024  # one frame from the client: a paste, or a resize
PING_SEC = 20  # keeps the socket busier than the server's 30 s read timeout


class TicketOut(Out):
    ticket: str
    url: str
    expires_in: int
    idle_sec: int


@bp.post("/sessions/<uuid:session_id>/terminal-tickets")
@guard(Role.viewer)
@doc(f"A one-time ticket for a terminal in your session's sandbox, valid "
     f"{terminals.TICKET_SEC} s; open `url` as a WebSocket. 409 `sandbox_not_bound` before "
     f"the session has a sandbox; 429 past the session's terminal limit (5 by default) "
     "or the member's or workspace's", response=TicketOut, status=201,
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
    ws = Server.accept(request.environ, ping_interval=PING_SEC,
                       max_message_size=MESSAGE_MAX)
    try:
        closing = terminals.relay(ws, who, request.args.get("cols"), request.args.get("rows"))
        ws.send(json.dumps({"type": "closed", "reason": closing.reason,
                            "message": closing.message}))
        ws.close(closing.code, closing.message[:120])
    except ConnectionClosed:
        pass
    return _after_websocket(ws)


def _after_websocket(ws: Server) -> Response:
    """What the server is handed once the socket closed: the WSGI servers each want
    their own sign that the connection was taken over, so that none writes an HTTP answer
    onto the closed WebSocket (a browser reports that as an invalid frame)."""

    class Done(Response):
        def __call__(self, *args, **kwargs):
            if ws.mode == "gunicorn":
                raise StopIteration()
            if ws.mode == "werkzeug":  # a dropped connection: it writes nothing more
                raise ConnectionError()
            return []

    return Done()

