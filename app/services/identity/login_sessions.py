"""Browser sign-ins kept on the server: signing out deletes the row, so a copy of the
(signed, not encrypted) session cookie taken before is worthless afterwards.

Each sign-in has its own row, so signing out on one device leaves the others signed in.
A password change still ends every sign-in at once through `User.session_version`.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from flask import current_app
from sqlalchemy import delete, select

from app.extensions import db
from app.models import LoginSession, User
from app.models.types import utcnow

SESSION_KEY = "login_sid"  # where the Flask session carries the sign-in's random id
MAX_SID_LENGTH = 128


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


def _max_age() -> timedelta:
    return timedelta(days=current_app.config.get("LOGIN_SESSION_MAX_AGE_DAYS", 30))


def start(user: User) -> str:
    """Record a new sign-in of `user` and return its id for the session cookie."""
    sid = secrets.token_urlsafe(32)
    # Rows past the maximum age can no longer sign anyone in: drop them as we go.
    db.session.execute(delete(LoginSession).where(LoginSession.created_at < utcnow() - _max_age()))
    db.session.add(LoginSession(user_id=user.id, digest=_digest(sid)))
    db.session.commit()
    return sid


def is_live(user_id: int, sid: object) -> bool:
    """Whether `sid` names a sign-in of `user_id` that has not ended."""
    if not isinstance(sid, str) or not sid or len(sid) > MAX_SID_LENGTH:
        return False
    row = db.session.scalar(select(LoginSession).where(LoginSession.digest == _digest(sid)))
    return (row is not None and row.user_id == user_id
            and row.created_at > utcnow() - _max_age())


def end(sid: object) -> None:
    """End one sign-in (sign-out). Unknown ids are ignored."""
    if isinstance(sid, str) and sid and len(sid) <= MAX_SID_LENGTH:
        db.session.execute(delete(LoginSession).where(LoginSession.digest == _digest(sid)))
        db.session.commit()


def end_all_but(user_id: int, sid: object) -> None:
    """After a password change: forget the user's other sign-ins (already dead by version)."""
    keep = _digest(sid) if isinstance(sid, str) else ""
    db.session.execute(delete(LoginSession).where(LoginSession.user_id == user_id,
                                                  LoginSession.digest != keep),
                       execution_options={"synchronize_session": False})
    db.session.commit()
