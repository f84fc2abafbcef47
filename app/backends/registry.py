"""Backend construction by sandbox type, and what each type declares it can do.

The capabilities feed the UI and the sandbox check (reference 9.5), so they are known
without building a client. Each backend module (and its SDK) is imported only when
that type is used.
"""

from __future__ import annotations

import threading
from typing import Any

from app.backends.base import Backend, Capabilities, Unsupported

SANDBOX_TYPES = ("docker", "e2b", "cube")


# The SDK's package imports itself in a circle: two threads importing its modules for
# the first time at once get `_DeadlockError` from the import system. One import at a
# time (cheap once imported: the modules are then in sys.modules).
_IMPORTING = threading.Lock()


def _backend_class(sandbox_type: str) -> type:
    with _IMPORTING:
        return _import_backend(sandbox_type)


def _import_backend(sandbox_type: str) -> type:
    if sandbox_type == "docker":
        from app.backends.docker.backend import DockerBackend  # the docker SDK only when needed

        return DockerBackend
    if sandbox_type == "e2b":
        from app.backends.e2b.e2b import E2BBackend  # the e2b SDK only when needed

        return E2BBackend
    if sandbox_type == "cube":
        from app.backends.e2b.cube import CubeBackend

        return CubeBackend
    raise Unsupported(f"unknown sandbox type {sandbox_type!r}")


def make_backend(sandbox_type: str, settings: dict[str, Any]) -> Backend:
    """A backend client bound to one config's connection settings (no I/O until used)."""
    return _backend_class(sandbox_type)(settings)


def capabilities_for(sandbox_type: str) -> Capabilities:
    """What a sandbox type can do, without contacting it."""
    return _backend_class(sandbox_type).capabilities
