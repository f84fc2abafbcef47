"""The web terminal's shell on Docker (issue 26): a PTY login shell in the sandbox, as the
sandbox user, with the given environment; resize, Ctrl-C and close reach it."""

from __future__ import annotations

import threading
import time

import pytest

from app.backends.docker.backend import DockerBackend
from tests.backends.conftest import BASE_IMAGE, Harness, docker_settings, require_docker


def read_until(term, text: bytes, seconds: float = 10.0) -> bytes:
    """What the shell printed until `text` shows up (fails after `seconds`)."""
    seen, deadline = b"", time.monotonic() + seconds
    while text not in seen:
        assert time.monotonic() < deadline, f"never saw {text!r} in {seen[-400:]!r}"
        chunk = term.read(0.2)
        assert chunk != b"", f"the shell ended before {text!r}: {seen[-400:]!r}"
        seen += chunk or b""
    return seen


@pytest.fixture(scope="module")
def sandbox():
    require_docker()
    backend = DockerBackend(docker_settings())
    h = Harness("docker", backend, BASE_IMAGE)
    info = h.create()
    yield backend, info.id
    h.cleanup()
    backend.close()


@pytest.fixture
def term(sandbox):
    backend, sandbox_id = sandbox
    shell = backend.open_terminal(sandbox_id, env={"GREETING": "hello there"}, cols=90, rows=20)
    yield shell
    shell.close()


def test_a_keystroke_round_trip_as_the_sandbox_user_in_the_workspace(term):
    term.write(b"echo hi-$((40+2)) $(id -un) $(pwd) \"$GREETING\" $TERM\r")
    read_until(term, b"hi-42 sandbox /workspace hello there xterm-256color")


def test_the_pty_has_the_asked_size_and_follows_a_resize(term):
    term.write(b"stty size\r")
    read_until(term, b"20 90")
    term.resize(120, 33)
    term.write(b"stty size\r")
    read_until(term, b"33 120")


def test_ctrl_c_stops_a_foreground_command(term):
    term.write(b"sleep 100; echo after-sleep\r")
    time.sleep(0.5)
    started = time.monotonic()
    term.write(b"\x03")
    term.write(b"echo back-$((1+1))\r")
    out = read_until(term, b"back-2", seconds=5)
    assert time.monotonic() - started < 5
    assert b"\nafter-sleep" not in out  # the list was interrupted, not only sleep


def test_exit_ends_the_terminal_for_good(sandbox):
    backend, sandbox_id = sandbox
    shell = backend.open_terminal(sandbox_id)
    try:
        shell.write(b"exit\r")
        deadline = time.monotonic() + 10
        while shell.read(0.2) != b"":
            assert time.monotonic() < deadline
        assert shell.read(0.1) == b""
        shell.write(b"echo ignored\r")  # writing to an ended shell is not an error
    finally:
        shell.close()


def test_close_unblocks_a_reader_and_ends_what_the_shell_started(sandbox):
    backend, sandbox_id = sandbox
    shell = backend.open_terminal(sandbox_id)
    shell.write(b"sleep 4321 & setsid sleep 4322 & echo started\r")
    read_until(shell, b"started")
    ended = threading.Event()

    def drain() -> None:  # what a relay's output pump does
        while shell.read(30) != b"":
            pass
        ended.set()

    threading.Thread(target=drain, daemon=True).start()
    time.sleep(0.3)
    shell.close()
    assert ended.wait(5), "a reader stayed blocked after close"
    shell.close()  # idempotent
    deadline = time.monotonic() + 5
    while "sleep 432" in backend.exec(sandbox_id, "ps -eo args").stdout:
        assert time.monotonic() < deadline, "the shell's processes outlived the terminal"
        time.sleep(0.2)
