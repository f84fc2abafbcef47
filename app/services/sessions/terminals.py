"""Web terminals of a session (issue 26, reference 9.3, decisions 18).

A member asks for a ticket (`issue_ticket`): random, stored as its sha256, bound to the
session, the member and (from a browser) the sign-in that asked, valid TICKET_SEC and
good for one connection. The WebSocket presents it (`redeem`), and `relay` then joins it
to a login shell on a PTY in the session's sandbox, as the sandbox user, with the
environment and egress policy a command of the member gets.

Capacity: at most TERMINALS_PER_SESSION terminals per session (the reference's 5), and
at most TERMINALS_PER_MEMBER and TERMINALS_PER_WORKSPACE, counted across processes
(app.services.capacity) so every process sees the same use; past one, 429
`quota_exceeded`. Each relay holds a server thread, so one process also serves at most
TERMINALS_MAX at once (503 past it).
A terminal closes after the config's `terminal_idle_disconnect_sec` without input (0:
IDLE_DEFAULT_SEC), when the session ends, and when its member signs out, is removed or
loses the sandbox. Opening one is in the activity log; what is typed is never stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from flask import current_app
from sqlalchemy import delete, select, update

from app.backends.base import Backend, BackendError, Terminal
from app.errors import AppError, Unauthorized
from app.extensions import db
from app.models import (
    BindingState,
    LoginSession,
    Membership,
    SandboxConfig,
    SandboxSession,
    Tenant,
    TerminalTicket,
    User,
)
from app.models.types import utcnow
from app.services import audit, capacity
from app.services.sandboxes.provider import backend_for
from app.services.sessions import binding, lifecycle
from app.services.sessions.files import NotBound

log = logging.getLogger("sandlot.terminals")

TICKET_SEC = 120
IDLE_DEFAULT_SEC = 900
HEARTBEAT_SEC = 10.0  # how often an open terminal's session and member are read again
KEEPALIVE_SEC = 60.0  # how often a provider's own sandbox timeout is pushed back (E2B, Cube)
POLL_SEC = 1.0  # the relay's longest wait before it looks at the clock again
MIN_SIZE, MAX_SIZE = 2, 1000  # columns and rows a client may ask for
INVALID_TICKET = ("This terminal ticket is not valid: a ticket opens one terminal, within "
                  f"{TICKET_SEC} seconds, for the member who asked for it.")


@dataclass(frozen=True)
class Ticket:
    token: str
    session_id: str
    expires_in: int
    idle_sec: int

    def answer(self) -> dict[str, Any]:
        """The API's and the page's answer: the ticket and the WebSocket address it opens."""
        return {"ticket": self.token, "expires_in": self.expires_in, "idle_sec": self.idle_sec,
                "url": f"/api/v1/sessions/{self.session_id}/terminal?ticket={self.token}"}


@dataclass(frozen=True)
class Redeemed:
    tenant: Tenant
    user: User
    session: SandboxSession
    login_digest: str | None
    session_version: int


def idle_seconds(doc: dict[str, Any]) -> int:
    return int(doc.get("terminal_idle_disconnect_sec") or 0) or IDLE_DEFAULT_SEC


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _config(session: SandboxSession) -> SandboxConfig:
    return lifecycle.live_config(session.tenant_id, session.sandbox_config_id)


# -- tickets ------------------------------------------------------------------------------

def issue_ticket(tenant: Tenant, user: User, session: SandboxSession,
                 login_sid: str | None) -> Ticket:
    """A one-time ticket for a terminal in `session` (the caller's own), refused as the
    connection would be: scripts off, a cordoned config, no sandbox yet, or no room."""
    lifecycle.precheck(tenant, user, session, "sh", None, None)
    if session.binding_state == BindingState.gone:
        raise binding.SandboxGone()
    if session.binding_state != BindingState.bound:
        raise NotBound()
    capacity.check(_use(session), _limits(), "terminals", ADVICE)
    token = secrets.token_urlsafe(32)
    now = utcnow()
    db.session.execute(delete(TerminalTicket).where(
        TerminalTicket.expires_at < now - timedelta(hours=1)))
    db.session.add(TerminalTicket(
        digest=_digest(token), tenant_id=tenant.id, user_id=user.id, session_id=session.id,
        login_digest=hashlib.sha256(login_sid.encode()).hexdigest() if login_sid else None,
        session_version=user.session_version, expires_at=now + timedelta(seconds=TICKET_SEC)))
    db.session.commit()
    return Ticket(token, session.id, TICKET_SEC, idle_seconds(_config(session).config))


def redeem(session_id: str, token: object) -> Redeemed:
    """Use a ticket (once); 401 for a ticket that is unknown, used, expired, for another
    session, or whose member signed out, was removed or changed their password since."""
    if not isinstance(token, str) or not 20 <= len(token) <= 100:
        raise Unauthorized(INVALID_TICKET)
    digest, now = _digest(token), utcnow()
    used = db.session.execute(
        update(TerminalTicket)
        .where(TerminalTicket.digest == digest, TerminalTicket.session_id == session_id,
               TerminalTicket.used_at.is_(None), TerminalTicket.expires_at > now)
        .values(used_at=now))
    db.session.commit()
    ticket = db.session.get(TerminalTicket, digest) if used.rowcount == 1 else None
    found = _holder(ticket) if ticket is not None else None
    if found is None:
        raise Unauthorized(INVALID_TICKET)
    return found


def _holder(ticket: TerminalTicket | Redeemed) -> Redeemed | None:
    """Who the ticket (or open terminal) is for, while they still may use the session."""
    tenant_id = ticket.tenant.id if isinstance(ticket, Redeemed) else ticket.tenant_id
    user_id = ticket.user.id if isinstance(ticket, Redeemed) else ticket.user_id
    session_id = ticket.session.id if isinstance(ticket, Redeemed) else ticket.session_id
    row = db.session.execute(
        select(User, Tenant, SandboxSession)
        .join(Membership, Membership.user_id == User.id)
        .join(Tenant, Tenant.id == Membership.tenant_id)
        .join(SandboxSession, (SandboxSession.tenant_id == Tenant.id)
              & (SandboxSession.user_id == User.id))
        .where(User.id == user_id, Tenant.id == tenant_id,
               SandboxSession.id == session_id)).first()
    if row is None:
        return None
    user, tenant, session = row
    if not user.is_active or user.session_version != ticket.session_version:
        return None
    if ticket.login_digest is not None and db.session.scalar(
            select(LoginSession.id).where(LoginSession.digest == ticket.login_digest,
                                          LoginSession.user_id == user.id)) is None:
        return None
    return Redeemed(tenant, user, session, ticket.login_digest, ticket.session_version)


# -- capacity -----------------------------------------------------------------------------

TERMINAL_SLOT = "terminal"  # a kind of capacity.ThreadSlots


def _use(session: SandboxSession) -> capacity.Use:
    return capacity.Use("terminal", session.tenant_id, f"user:{session.user_id}", session.id)


def _limits() -> tuple[capacity.Limit, ...]:
    cfg = current_app.config
    return (capacity.Limit("terminals_per_session", "session",
                           int(cfg["TERMINALS_PER_SESSION"])),
            capacity.Limit("terminals_per_member", "member", int(cfg["TERMINALS_PER_MEMBER"])),
            capacity.Limit("terminals_per_workspace", "workspace",
                           int(cfg["TERMINALS_PER_WORKSPACE"])))


ADVICE = "close one (another tab) first."


# -- the relay ----------------------------------------------------------------------------

class Socket(Protocol):
    """What the relay needs of a WebSocket (simple_websocket.Server)."""

    def send(self, data: bytes | str) -> None: ...

    def receive(self, timeout: float | None = None) -> bytes | str | None: ...


@dataclass
class Closing:
    reason: str  # ended, idle, session_ended, revoked, quota_exceeded, error
    message: str
    code: int = 1000


def _size(raw: object, default: int) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        return default
    return min(max(value, MIN_SIZE), MAX_SIZE)


def relay(ws: Socket, who: Redeemed, cols: object = None, rows: object = None) -> Closing:
    """Join the WebSocket to a new shell in the session's sandbox until one side ends;
    returns why it ended (the caller sends it and closes the socket)."""
    cfg, slots = current_app.config, capacity.thread_slots()
    try:  # a terminal holds a server thread, within this process's terminals and threads
        slots.take(TERMINAL_SLOT, int(cfg["TERMINALS_MAX"]), int(cfg["SKILL_STREAMS_MAX"]),
                   "Too many terminals are open on this server; try again in a moment.")
    except AppError as exc:
        return Closing("unavailable", exc.message, 1013)
    try:
        return _relay_admitted(ws, who, _size(cols, 80), _size(rows, 24))
    finally:
        slots.release(TERMINAL_SLOT)


def _relay_admitted(ws: Socket, who: Redeemed, cols: int, rows: int) -> Closing:
    try:
        prepared = lifecycle.precheck(who.tenant, who.user, who.session, "sh", None, None)
        config = _config(who.session)
        row_id = capacity.admit(_use(who.session), _limits(), "terminals", ADVICE)
    except AppError as exc:
        db.session.rollback()
        return Closing(exc.code, exc.message, 4000 + exc.status)
    backend = backend_for(config.config, who.session.sandbox_id, who.session.traffic_token)
    try:
        try:
            with lifecycle.provider_errors(config, "opening a terminal"):
                sandbox_id = binding.bound_sandbox(who.session, backend)
                if sandbox_id is None:
                    raise NotBound()
                term = backend.open_terminal(sandbox_id, env=dict(prepared.resolution.env),
                                             cols=cols, rows=rows)
        except AppError as exc:
            db.session.rollback()
            return Closing(exc.code, exc.message, 4000 + exc.status)
        audit.record(who.tenant, lifecycle.MemberActor(who.user), "session.terminal_opened",
                     "session", who.session.id, {"sandbox_config_id": config.id})
        keep_alive = _keep_alive(backend, sandbox_id, binding.session_spec(
            who.session, config, who.session.binding_version).timeout_sec)
        db.session.commit()  # no pooled connection is held while the terminal is open
        try:
            return _pump(ws, term, who, idle_seconds(config.config), keep_alive)
        finally:
            term.close()
    finally:
        backend.close()
        capacity.release(row_id)


def _keep_alive(backend: Backend, sandbox_id: str, seconds: int) -> Callable[[], None]:
    """What keeps the provider from pausing the sandbox under an open terminal: E2B and
    Cube time a sandbox out by their own clock, which a shell's traffic does not reset
    (Docker's idle pause reads the session's last use, which the heartbeat marks)."""
    if not backend.capabilities.timeout_refresh:
        return lambda: None

    def push_back() -> None:
        try:
            backend.set_timeout(sandbox_id, seconds)
        except BackendError as exc:  # the next beat tries again
            log.warning("terminal could not refresh the sandbox timeout: %s", exc.reason)
    return push_back


def _pump(ws: Socket, term: Terminal, who: Redeemed, idle_sec: int,
          keep_alive: Callable[[], None]) -> Closing:
    """Shell output to the socket on a thread of its own; keystrokes, resizes and the
    clocks (idle, heartbeat, the provider's timeout) on this one."""
    ended = threading.Event()

    def output() -> None:
        try:
            while not ended.is_set():
                data = term.read(POLL_SEC)
                if data == b"":
                    break
                if data:
                    ws.send(data)
        except Exception:  # noqa: BLE001 - the socket closed: the loop below notices
            pass
        finally:
            ended.set()

    ws.send(json.dumps({"type": "ready", "idle_sec": idle_sec}))
    reader = threading.Thread(target=output, name="terminal-output", daemon=True)
    reader.start()
    now = time.monotonic()
    idle_at, beat_at, alive_at = now + idle_sec, now + HEARTBEAT_SEC, now + KEEPALIVE_SEC
    try:
        while not ended.is_set():
            message = ws.receive(timeout=min(POLL_SEC, max(0.0, idle_at - time.monotonic())))
            now = time.monotonic()
            if message is not None:
                idle_at = now + idle_sec
                _take(term, message)
            if now >= idle_at:
                return Closing("idle", f"This terminal was closed after {_span(idle_sec)} "
                               "without input.", 4408)
            if now >= beat_at:
                beat_at = now + HEARTBEAT_SEC
                closing = _still_allowed(who)
                if closing is not None:
                    return closing
            if now >= alive_at:
                alive_at = now + KEEPALIVE_SEC
                keep_alive()
        return Closing("ended", "The shell ended.")
    finally:
        ended.set()
        term.close()
        reader.join(5)


def _take(term: Terminal, message: bytes | str) -> None:
    """A binary frame is keystrokes; a text frame a JSON control message."""
    if isinstance(message, bytes):
        term.write(message)
        return
    try:
        control = json.loads(message)
    except ValueError:
        return
    if isinstance(control, dict) and control.get("type") == "resize":
        term.resize(_size(control.get("cols"), 80), _size(control.get("rows"), 24))


def _still_allowed(who: Redeemed) -> Closing | None:
    """A reason to close when the terminal's session ended or its member may no longer
    use it; else the session is marked used, so that an open terminal's sandbox is not
    paused as idle under it (binding.pause_idle)."""
    try:
        db.session.expire_all()
        if _holder(who) is None:
            if db.session.get(SandboxSession, who.session.id) is None:
                return Closing("session_ended", "The session ended.", 4410)
            return Closing("revoked", "You signed out or no longer have access to this "
                           "session.", 4401)
        db.session.execute(update(SandboxSession).where(SandboxSession.id == who.session.id)
                           .values(last_used_at=utcnow()))
        db.session.commit()
    except Exception:  # noqa: BLE001 - a database hiccup: keep the shell, try next beat
        log.warning("terminal heartbeat failed", exc_info=True)
    finally:
        db.session.rollback()  # no transaction or pooled connection held between beats
    return None


def _span(seconds: int) -> str:
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    if seconds % 60 == 0:
        minutes = seconds // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds} seconds"


# -- starting the sandbox -----------------------------------------------------------------
