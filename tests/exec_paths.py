"""Suites that run both ways a Docker command can start (issue 29): through the
sandbox's exec agent and through `docker exec` (SANDBOX_EXEC_AGENT=0). A module opts in
with `EXEC_PATHS = True`; its module-scoped fixtures that make sandboxes depend on
`exec_path`, so each path gets sandboxes made under its own setting. Registered for
every test by the root conftest's `pytest_plugins`."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.backends.docker import exec_agent

PATHS = ("agent", "engine")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if getattr(metafunc.module, "EXEC_PATHS", False) and "exec_path" in metafunc.fixturenames:
        metafunc.parametrize("exec_path", PATHS, indirect=True, scope="module")


@pytest.fixture(scope="module")
def exec_path(request) -> Iterator[str]:
    """"agent" or "engine"; the agent's case fails at its end if Docker sandboxes ran
    commands but none through an agent (the suite would then test the fallback twice)."""
    path = getattr(request, "param", "default")
    if path == "default":
        yield path
        return
    old = os.environ.get("SANDBOX_EXEC_AGENT")
    os.environ["SANDBOX_EXEC_AGENT"] = "1" if path == "agent" else "0"
    served, asked = exec_agent.served, exec_agent.asked
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("SANDBOX_EXEC_AGENT", None)
        else:
            os.environ["SANDBOX_EXEC_AGENT"] = old
    if path == "agent" and exec_agent.asked > asked:  # a Docker sandbox ran something
        assert exec_agent.served > served, "no command of this module went through an agent"


@pytest.fixture(autouse=True)
def _exec_path_used(exec_path: str) -> None:
    """Every test asks for `exec_path`, so each of an opted-in module is parametrised."""
