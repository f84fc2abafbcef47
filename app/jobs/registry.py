"""Job kinds by name. A kind's function takes a JobContext and the row's params."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KINDS: dict[str, Callable[..., dict[str, Any] | None]] = {}


class JobFailed(Exception):
    """The job ran and reached a definite, explainable failure (status `failed`)."""


def job_kind(name: str) -> Callable:
    def register(fn: Callable) -> Callable:
        KINDS[name] = fn
        return fn

    return register
