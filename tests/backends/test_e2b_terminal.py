"""The web terminal's shell on E2B and Cube (issue 26): `open_terminal` through the real
`e2b` SDK's `sandbox.pty` against tests/fakes/e2b_server.py, whose envd runs the shell
as a `docker exec` on a real pseudo-terminal in the sandbox's container.

One fake server and one sandbox per provider for the whole module; every test opens
its own shell and closes it.
"""

from __future__ import annotations

import re
import threading
import time
import traceback
from collections.abc import Iterator

import pytest

from app.backends import registry
from app.backends.base import BackendError, SandboxNotFound, SandboxSpec, Terminal
from app.backends.e2b.terminal import BUFFER_BYTES
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, RUN_LABEL, require_docker
from tests.fakes.e2b_server import FakeE2BServer, wait_for
from tests.fakes.envd import DEFAULT_USER

ENV_SECRET = "env-secret-5e1f0a"


class Sandbox:
    def __init__(self, flavor: str):
        self.server = FakeE2BServer(flavor, image=BASE_IMAGE, docker_host=DOCKER_HOST,
                                    run_id=f"{RUN_ID}{flavor}t").start()
        self.backend = registry.make_backend(flavor, self.server.settings())
        metadata = {"sandlot_tenant_id": "7", "sandlot_session_id": f"term-{RUN_ID}",
                    "sandlot_binding_version": "1", "sandlot_provider": flavor,
                    "sandlot_sandbox_config_id": "cfg-1", "sandlot_purpose": "session",
                    RUN_LABEL: RUN_ID}
        self.id = self.backend.create(SandboxSpec(template="", metadata=metadata)).id

    def open(self, **kwargs) -> Terminal:
        return self.backend.open_terminal(self.id, **kwargs)

    def sh(self, command: str) -> str:
        """A plain exec as root, beside the terminal."""
        return self.backend.exec(self.id, command, user="root").stdout

    def stop(self) -> None:
        try:
            self.backend.delete(self.id)
        finally:
            self.backend.close()
            self.server.stop()


@pytest.fixture(scope="module", params=["e2b", "cube"])
def box(request) -> Iterator[Sandbox]:
    require_docker()
    sandbox = Sandbox(request.param)
    try:
        yield sandbox
    finally:
        sandbox.stop()


@pytest.fixture
def term(box: Sandbox) -> Iterator[Terminal]:
    terminal = box.open()
    try:
        yield terminal
    finally:
        terminal.close()


def read_until(terminal: Terminal, pattern: str, timeout: float = 10.0) -> re.Match:
    """Read until the output so far matches `pattern` (a regex on the decoded text)."""
    seen = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        chunk = terminal.read(0.2)
        if chunk == b"":
            break
        seen += chunk or b""
        found = re.search(pattern, seen.decode("utf-8", "replace"))
        if found:
            return found
    raise AssertionError(f"{pattern!r} never came; the terminal showed {seen[-2000:]!r}")


def read_to_end(terminal: Terminal, timeout: float = 10.0) -> bytes:
    seen = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        chunk = terminal.read(0.2)
        if chunk == b"":
            return seen
        seen += chunk or b""
    raise AssertionError(f"the shell never ended; it showed {seen[-2000:]!r}")


def shell_pid(terminal: Terminal) -> int:
    """The shell's pid in the container (the typed `$$` never matches the pattern)."""
    terminal.write(b"echo pid-$$\n")
    return int(read_until(terminal, r"pid-(\d+)")[1])


# The image has no ps: the pids in the container whose command line is argv[1:].
PIDS_OF = r"""
import os, sys
want = "\0".join(sys.argv[1:]) + "\0"
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if open(f"/proc/{pid}/cmdline").read() == want:
            print(pid)
    except OSError:
        pass
"""


def running(box: Sandbox, command: str) -> bool:
    return box.sh(f"python3 -c '{PIDS_OF}' {command}").strip() != ""


def test_a_command_typed_comes_back(term):
    term.write(b"echo mark-$((40+2))\n")

    read_until(term, r"mark-42")


def test_resize_reaches_the_shell(term):
    term.resize(100, 30)
    term.write(b'echo "size=$(stty size)"\n')

    read_until(term, r"size=30 100")


def test_ctrl_c_stops_the_foreground_command_and_the_prompt_returns(box, term):
    term.write(b"sleep 171\n")
    assert wait_for(lambda: running(box, "sleep 171"), 10)

    term.write(b"\x03")
    term.write(b"echo back-$((2+3))\n")

    read_until(term, r"back-5", timeout=5)
    assert not running(box, "sleep 171")


def test_env_user_cwd_and_term_of_the_shell(box):
    terminal = box.open(env={"X": "val-8b21"})
    try:
        terminal.write(b'echo "x=$X u=$(id -un) d=$(pwd) t=$TERM"\n')

        read_until(terminal, rf"x=val-8b21 u={DEFAULT_USER} d=/workspace t=xterm-256color")
    finally:
        terminal.close()


def test_a_cwd_and_user_given_are_honoured(box):
    terminal = box.open(user="root", cwd="/tmp")
    try:
        terminal.write(b'echo "u=$(id -un) d=$(pwd)"\n')

        read_until(terminal, r"u=root d=/tmp")
    finally:
        terminal.close()


def test_exit_ends_the_terminal_for_ever(term):
    term.write(b"exit\n")

    read_to_end(term)
    assert term.read(0.1) == b""
    assert term.read(0) == b""
    term.write(b"ignored\n")  # the shell is gone: nothing to do, nothing raised
    term.resize(90, 20)
    started = time.monotonic()
    term.close()
    term.close()
    assert time.monotonic() - started < 5


def test_typing_into_a_shell_that_just_ended_is_no_error(box, term):
    pid = shell_pid(term)
    # More output than the terminal buffers: its reader has not reached the end yet.
    term.write(b"head -c 400000 /dev/zero | tr '\\0' x; exit\n")
    assert wait_for(lambda: box.sh(f"kill -0 {pid} 2>/dev/null || echo gone").strip(), 10)

    term.write(b"too late\n")
    term.resize(90, 20)

    assert len(read_to_end(term)) > 400000


def test_close_unblocks_a_reader_and_ends_the_shell_in_the_sandbox(box):
    terminal = box.open()
    pid = shell_pid(terminal)
    terminal.write(b"sleep 172\n")
    assert wait_for(lambda: running(box, "sleep 172"), 10)
    while terminal.read(0.3) is not None:
        pass  # drain the echo, so the reader below blocks
    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(terminal.read(30)))
    reader.start()
    time.sleep(0.3)
    assert reader.is_alive()

    terminal.close()

    reader.join(5)
    assert not reader.is_alive() and got == [b""]
    assert terminal.read(0) == b""
    assert wait_for(lambda: not running(box, "sleep 172"), 5)
    assert box.sh(f"kill -0 {pid} 2>/dev/null && echo alive || echo gone").strip() == "gone"
    terminal.close()  # idempotent


def test_a_reader_that_stalls_holds_the_shell_back_instead_of_filling_memory(box, term):
    term.write(b"head -c 12000000 /dev/zero | tr '\\0' x; echo; echo done-$((1+1))\n")
    time.sleep(2)  # nobody reads

    assert running(box, "head -c 12000000 /dev/zero")
    assert term._buffered <= BUFFER_BYTES + (64 << 10)
    tail, total, end = b"", 0, time.monotonic() + 30
    while b"done-2" not in tail and time.monotonic() < end:
        chunk = term.read(1) or b""
        total, tail = total + len(chunk), (tail + chunk)[-64:]
    assert b"done-2" in tail and total > 12_000_000  # all of it, once read


def test_a_sandbox_that_is_not_ours_has_no_terminal(box):
    with pytest.raises(SandboxNotFound):
        box.backend.open_terminal("no-such-sandbox")


def test_a_refused_shell_is_a_backend_error_without_secrets(box):
    with pytest.raises(BackendError) as caught:
        box.open(user="nobody-such", env={"TOKEN": ENV_SECRET})

    assert "nobody-such" in caught.value.reason
    text = "\n".join([str(caught.value), *traceback.format_exception(caught.value)])
    assert ENV_SECRET not in text and box.server.api_key not in text
