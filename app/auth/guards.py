"""One guard per route: the minimum role and the API-key policy (reference 2.3).

Semantics: no credentials -> 401; a role below the minimum -> 403; an API key the
route's policy refuses -> 403. API-key callers bypass the role check and are judged
by the key policy alone. A foreign tenant's id is a 404, which `tenancy` enforces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from flask import g, request

from app.auth import loaders
from app.errors import Forbidden, Unauthorized
from app.models import Role

REFUSED = "refused"
ANY_KEY = "any_key"  # identity introspection: any valid key of the tenant
FULL_ACCESS = "full_access"


@dataclass(frozen=True)
class Guard:
    role: Role | None  # None: any member of the tenant
    api_key: str  # REFUSED, ANY_KEY, FULL_ACCESS, or a capability name

    def key_allows(self, key) -> bool:
        if self.api_key in (REFUSED, ANY_KEY):
            return self.api_key == ANY_KEY
        return key.full_access if self.api_key == FULL_ACCESS else key.allows(self.api_key)


def is_api_request() -> bool:
    return request.path.startswith("/api/")


def guard(role: Role | str | None = None, api_key: str = REFUSED) -> Callable:
    """Declare and enforce who may call the decorated view."""
    spec = Guard(Role(role) if role else None, api_key)

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any):
            enforce(spec)
            return view(*args, **kwargs)

        wrapper.guard = spec  # read by the route sweep and the OpenAPI generator
        return wrapper

    return decorate


def public(view: Callable) -> Callable:
    """Mark a view as deliberately open to anonymous callers."""
    view.public = True
    return view


def enforce(spec: Guard) -> None:
    principal = loaders.load_api_principal() if is_api_request() else loaders.load_web_principal()
    if principal is None:
        raise Unauthorized()
    g.principal = principal
    if principal.api_key is not None:
        if not spec.key_allows(principal.api_key):
            raise Forbidden("API key scope does not allow this operation.")
        return
    if spec.role is not None and not principal.role.at_least(spec.role):
        raise Forbidden("Your role in this workspace does not allow this.")
