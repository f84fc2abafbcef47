"""Bearer tokens for the API: short-lived HS256 JWTs carrying the session version."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import jwt

ALGORITHM = "HS256"
AUDIENCE = "sandlot-api"


@dataclass(frozen=True)
class TokenClaims:
    user_id: int
    tenant_id: int
    session_version: int


class InvalidTokenError(Exception):
    """The token is malformed, forged or expired."""


def issue(claims: TokenClaims, secret: str, ttl_seconds: int) -> tuple[str, datetime]:
    expires_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=ttl_seconds)
    payload = {
        "sub": str(claims.user_id),
        "tid": claims.tenant_id,
        "sv": claims.session_version,
        "aud": AUDIENCE,
        "exp": expires_at,
        "iat": datetime.now(UTC),
    }
    return jwt.encode(payload, secret, algorithm=ALGORITHM), expires_at


def verify(token: str, secret: str) -> TokenClaims:
    try:
        payload = jwt.decode(
            token, secret, algorithms=[ALGORITHM], audience=AUDIENCE,
            options={"require": ["exp", "sub", "aud"]},
        )
        return TokenClaims(int(payload["sub"]), int(payload["tid"]), int(payload["sv"]))
    except (jwt.PyJWTError, KeyError, ValueError, TypeError) as exc:
        raise InvalidTokenError(str(exc)) from exc
