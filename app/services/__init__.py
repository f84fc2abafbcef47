"""Domain logic. Plain functions that take the tenant, the actor and plain data.

Services never read the request, the session or `g`; they raise `app.errors` types.
"""

from __future__ import annotations

from typing import Protocol


class Actor(Protocol):
    """Whoever performs a mutation (a Principal from the web or API, or a CLI actor)."""

    @property
    def actor_id(self) -> int | None: ...

    @property
    def actor_label(self) -> str: ...
