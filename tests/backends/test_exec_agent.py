"""The exec agent (issue 29) on the real engine: what the sandbox itself can do to it,
and an agent that lies, floods, stays silent or dies mid-run.

The suites of exec, runs, cancel, timeouts, fork bombs and members' variables run on
both paths (EXEC_PATHS in their modules, tests/exec_paths.py); this file covers what
only the agent path has."""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.backends.docker import exec_agent
from app.backends.docker.backend import DockerBackend
from tests.backends.conftest import (
    BASE_IMAGE,
    BUSYBOX_IMAGE,
    Harness,
    docker_settings,
    require_docker,
)

ATTACK = r"""
import json, os, socket, struct, sys
user = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/run/sandlot/agent.sock")
except OSError as exc:
    print("refused at connect", exc.errno)
    raise SystemExit
request = json.dumps({"argv": ["id", "-u"], "user": user, "uid": 0}).encode()
try:
    s.sendall(struct.pack(">L", len(request)) + request)
except OSError as exc:
    print("refused at send", exc.errno)
    raise SystemExit
s.settimeout(5)
answer = b""
try:
    while chunk := s.recv(65536):
        answer += chunk
except OSError:
    pass
print("answer", answer)
"""


def _live(backend: DockerBackend, sandbox_id: str) -> exec_agent.Live | None:
    return exec_agent.find(backend.api, backend._inspect(sandbox_id), backend.settings.host)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[tuple[DockerBackend, str]]:
    require_docker()
    backend = DockerBackend(docker_settings())
    harness = Harness("docker", backend, BASE_IMAGE)
    try:
        info = harness.create()
        assert _live(backend, info.id) is not None
        yield backend, info.id
    finally:
        harness.cleanup()
        backend.close()


@pytest.fixture
def fresh(sandbox) -> Iterator[tuple[DockerBackend, str]]:
    """The module's sandbox with its agent trusted again after a test made it fall back."""
    yield sandbox
    exec_agent._live.clear()


def test_the_sandbox_user_cannot_make_the_agent_run_anything(sandbox):
    backend, sandbox_id = sandbox
    backend.write_file(sandbox_id, "/tmp/attack.py", ATTACK.encode())
    for user in ("root", "sandbox"):
        result = backend.exec(sandbox_id, f"python3 /tmp/attack.py {user}")
        assert result.exit_code == 0, result
        assert "answer b''" in result.stdout or "refused" in result.stdout, result.stdout
        assert "\\x04" not in result.stdout  # no start frame: nothing ran
    # Root in the sandbox is refused as well (it is not the host).
    result = backend.exec(sandbox_id, "python3 /tmp/attack.py root", user="root")
    assert "answer b''" in result.stdout or "refused" in result.stdout, result.stdout


def test_the_sandbox_user_can_neither_replace_nor_inspect_the_agent(sandbox):
    backend, sandbox_id = sandbox
    replace = backend.exec(sandbox_id, "rm -f /run/sandlot/agent.sock; "
                                       "mv /run/sandlot/agent.sock /tmp/x; touch /run/sandlot/y")
    assert replace.exit_code != 0
    assert "Permission denied" in replace.stderr or "Read-only" in replace.stderr
    peek = backend.exec(sandbox_id, "for p in /proc/[0-9]*; do grep -q agent.py $p/cmdline "
                                    "2>/dev/null && cat $p/environ; done; echo end")
    assert peek.stdout.strip().endswith("end")
    assert "Permission denied" in peek.stderr, peek
    # the agent still serves the host
    assert backend.exec(sandbox_id, "echo still").stdout == "still\n"
    assert _live(backend, sandbox_id) is not None


def test_runs_go_through_the_agent_with_the_engines_environment(sandbox):
    backend, sandbox_id = sandbox
    served = exec_agent.served
    through_agent = backend.exec(sandbox_id, "env | sort; umask; id; trap", env={"K": "v"},
                                 cwd="/workspace")
    assert exec_agent.served == served + 1
    os.environ["SANDBOX_EXEC_AGENT"] = "0"
    try:
        through_engine = backend.exec(sandbox_id, "env | sort; umask; id; trap",
                                      env={"K": "v"}, cwd="/workspace")
    finally:
        os.environ.pop("SANDBOX_EXEC_AGENT")
    assert exec_agent.served == served + 1
    assert through_agent.stdout == through_engine.stdout
    assert "K=v" in through_agent.stdout


def _fake_agent(live: exec_agent.Live, behave: Callable[[socket.socket], None]) \
        -> Callable[[], None]:
    """Put a fake agent on the live agent's socket (the real one's is set aside);
    returns what puts the real one back."""
    real = live.socket + ".real"
    os.rename(live.socket, real)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(live.socket)
    server.listen(8)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=behave, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def restore() -> None:
        stop.set()
        thread.join()
        server.close()
        os.replace(real, live.socket)
    return restore


def _garbage(conn: socket.socket) -> None:
    conn.sendall(os.urandom(64) * 4)
    conn.close()


def _huge_first(conn: socket.socket) -> None:
    conn.sendall(struct.pack(">BxxxL", 4, 0xFFFFFFF0))
    time.sleep(3)
    conn.close()


def _silent(conn: socket.socket) -> None:
    time.sleep(8)
    conn.close()


def _huge_mid_run(conn: socket.socket) -> None:
    conn.sendall(struct.pack(">BxxxL", 4, 3) + b"1 1")
    conn.sendall(struct.pack(">BxxxL", 1, 5) + b"hello")
    conn.sendall(struct.pack(">BxxxL", 1, 0x7FFFFFFF))
    try:
        while True:
            conn.sendall(b"x" * 65536)
    except OSError:
        pass


@pytest.mark.parametrize("behave", [_garbage, _huge_first, _silent],
                         ids=["garbage", "huge-frame", "nothing"])
def test_an_agent_that_misbehaves_before_starting_falls_back_to_the_engine(fresh, behave):
    backend, sandbox_id = fresh
    live = _live(backend, sandbox_id)
    assert live is not None
    restore = _fake_agent(live, behave)
    try:
        started = time.monotonic()
        result = backend.exec(sandbox_id, "echo through-the-engine", timeout_sec=20)
        assert time.monotonic() - started < exec_agent.HELLO_SEC + 3
        assert result.stdout == "through-the-engine\n" and result.exit_code == 0
        # the next runs go through the engine without asking the agent again
        assert backend.exec(sandbox_id, "echo again").stdout == "again\n"
    finally:
        restore()


def test_an_agent_that_floods_mid_run_cannot_hang_or_crash_the_app(fresh):
    backend, sandbox_id = fresh
    live = _live(backend, sandbox_id)
    assert live is not None
    restore = _fake_agent(live, _huge_mid_run)
    try:
        started = time.monotonic()
        result = backend.exec(sandbox_id, "echo never-run", timeout_sec=20)
        assert time.monotonic() - started < 5
        assert result.exit_code != 0 and not result.timed_out
        assert "exec agent stopped" in result.stderr
        assert backend.exec(sandbox_id, "echo after").stdout == "after\n"
    finally:
        restore()


@pytest.fixture
def own_sandbox() -> Iterator[tuple[DockerBackend, str]]:
    require_docker()
    backend = DockerBackend(docker_settings())
    harness = Harness("docker", backend, BASE_IMAGE)
    try:
        info = harness.create()
        yield backend, info.id
    finally:
        harness.cleanup()
        backend.close()


def _kill_agent_after(live: exec_agent.Live, seconds: float) -> threading.Thread:
    def kill() -> None:
        time.sleep(seconds)
        os.kill(live.pid, signal.SIGKILL)
    thread = threading.Thread(target=kill)
    thread.start()
    return thread


@pytest.mark.parametrize("command,timeout,timed_out", [
    ("sleep 2; echo done", 20, False), ("sleep 60", 2, True)], ids=["ends", "times-out"])
def test_a_run_whose_agent_is_killed_still_ends_with_its_verdict(own_sandbox, command,
                                                                  timeout, timed_out):
    backend, sandbox_id = own_sandbox
    live = _live(backend, sandbox_id)
    assert live is not None
    killer = _kill_agent_after(live, 0.5)
    started = time.monotonic()
    result = backend.exec(sandbox_id, command, timeout_sec=timeout)
    killer.join()
    assert 1.5 < time.monotonic() - started < 6
    assert result.timed_out is timed_out and result.exit_code != 0, result
    assert "exec agent stopped" in result.stderr or timed_out
    # nothing of it is left, and the sandbox goes on through the engine
    after = backend.exec(sandbox_id, "ps -eo args | grep -c '^sleep 60' || true")
    assert after.stdout.strip() == "0"
    assert _live(backend, sandbox_id) is None


def test_an_image_without_python_has_no_agent_and_still_runs(own_sandbox):
    backend, _ = own_sandbox
    harness = Harness("docker", backend, BUSYBOX_IMAGE)
    try:
        info = harness.create()
        assert _live(backend, info.id) is None
        result = backend.exec(info.id, "echo hi; exit 4")
        assert (result.stdout, result.exit_code) == ("hi\n", 4)
    finally:
        harness.cleanup()


def test_the_agent_directory_goes_with_the_sandbox_and_a_leftover_is_swept(own_sandbox):
    backend, sandbox_id = own_sandbox
    found = exec_agent.of(backend._inspect(sandbox_id))
    assert found is not None and found.path.is_dir()
    backend.delete(sandbox_id)
    assert not found.path.exists()
    leftover = exec_agent.create()
    assert exec_agent.sweep_orphans(backend.api, grace_sec=3600) == []
    old = time.time() - 7200
    os.utime(leftover.path, (old, old))
    assert leftover.token in exec_agent.sweep_orphans(backend.api, grace_sec=3600)
    assert not Path(leftover.path).exists()
