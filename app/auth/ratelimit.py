"""Limits on password sign-in, per client IP and per account, shared by the web form and the
API: guessing is slowed wherever it is tried. Only failed attempts count, so people who
type their password right are never locked out by their own sign-ins.

Test-then-deduct (Flask-Limiter's `deduct_when`) lets a burst of parallel attempts pass
the test before any is counted; the server's few threads bound that overshoot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from flask import Response, current_app, request
from flask_limiter.util import get_remote_address

from app.extensions import limiter


def _account_key() -> str:
    """The account a sign-in attempt names, hashed (no email in the limiter's storage)."""
    if request.is_json:
        body = request.get_json(silent=True)
        email = body.get("email") if isinstance(body, dict) else None
    else:
        email = request.form.get("email")
    if not isinstance(email, str) or not email.strip():
        # No account named: count it against this address (an empty key would make
        # Flask-Limiter log an error and skip the limit).
        return f"no-account:{get_remote_address()}"
    return hashlib.sha256(email.strip().lower().encode("utf-8", "replace")).hexdigest()[:32]


def _failed(response: Response) -> bool:
    return response.status_code >= 400


def login_limits(view: Callable) -> Callable:
    """Apply the per-account and per-IP sign-in limits (POST only) to a login view."""
    per_account = limiter.shared_limit(
        lambda: current_app.config["LOGIN_RATE_LIMIT_PER_ACCOUNT"], scope="login-account",
        key_func=_account_key, methods=["POST"], deduct_when=_failed)
    per_ip = limiter.shared_limit(
        lambda: current_app.config["LOGIN_RATE_LIMIT_PER_IP"], scope="login-ip",
        key_func=get_remote_address, methods=["POST"], deduct_when=_failed)
    return per_ip(per_account(view))
