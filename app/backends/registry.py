"""Backend construction by sandbox type, and what each type declares it can do.

The capabilities feed the UI and the sandbox check (reference 9.5), so they are known
without building a client. E2B and Cube are declared here already; their clients
arrive with the E2B/Cube backends.
"""

from __future__ import annotations

from typing import Any

from app.backends.base import Backend, Capabilities, Unsupported

SANDBOX_TYPES = ("docker", "e2b", "cube")

# Both speak the E2B API: reconnect via Connect, metadata and list, pause on timeout with
# auto-resume, timeout refresh, envd filesystem, template snapshots, volumes, and egress
# rules enforced by the provider.
_E2B_LIKE = Capabilities(reconnect=True, metadata=True, list=True, pause_resume=True,
                         timeout_refresh=True, filesystem=True, snapshots=True, volumes=True,
                         templates=True, egress_rules=True)


def _check(sandbox_type: str) -> None:
    if sandbox_type not in SANDBOX_TYPES:
        raise Unsupported(f"unknown sandbox type {sandbox_type!r}")


def make_backend(sandbox_type: str, settings: dict[str, Any]) -> Backend:
    """A backend client bound to one config's connection settings (no I/O until used)."""
    _check(sandbox_type)
    if sandbox_type == "docker":
        from app.backends.docker import DockerBackend  # the docker SDK only when needed

        return DockerBackend(settings)
    raise Unsupported(f"the {sandbox_type} backend arrives with the E2B/Cube backends")


def capabilities_for(sandbox_type: str) -> Capabilities:
    """What a sandbox type can do, without contacting it."""
    _check(sandbox_type)
    if sandbox_type == "docker":
        from app.backends.docker import DockerBackend

        return DockerBackend.capabilities
    return _E2B_LIKE
