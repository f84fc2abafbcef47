"""A Docker engine reached through its host's node (issue 28 item 2): the calls, their
live output, terminals and errors cross Redis intact, and what crosses is held to the
protocol (a caller cannot pick the node's engine URL, name a method that is not one, or
make the node delete a file of its choosing; garbage and silence cannot hang a caller).

The node runs in this process, in a thread, over the real engine and a real Redis, in a
deployment namespace of its own."""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from cryptography.fernet import Fernet

from app.backends import base
from app.backends.base import (
    BackendError,
    BackendUnavailable,
    EngineWithoutNode,
    SandboxPathNotFound,
    SandboxSpec,
)
from app.backends.docker.backend import DockerBackend
from app.backends.remote import client as remote_client
from app.backends.remote import codec
from app.backends.remote.client import RemoteBackend
from app.backends.remote.link import Link
from app.backends.remote.node import Node
from tests.backends.conftest import (
    BASE_IMAGE,
    RUN_ID,
    RUN_LABEL,
    docker_settings,
    require_docker,
)

ENGINE = "local"
KEYS = [Fernet.generate_key().decode()]


@pytest.fixture(scope="module")
def link() -> Iterator[Link]:
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.fail("TEST_REDIS_URL is not set (source /tmp/testenv.sh)")
    client = redis.Redis.from_url(url, socket_timeout=10)
    made = Link(client, f"test-{uuid.uuid4().hex[:12]}", KEYS)
    yield made
    for key in client.scan_iter(made.prefix + "*"):
        client.delete(key)
    client.close()


@pytest.fixture(scope="module")
def node(link: Link) -> Iterator[Node]:
    require_docker()
    serving = Node(link, {ENGINE: lambda settings: DockerBackend(
        {**settings, **docker_settings()})}, {"egress_rules": True}, max_calls=4)
    thread = threading.Thread(target=serving.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not link.live_nodes(ENGINE) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield serving
    serving.stopping.set()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def remote(link: Link, node: Node) -> RemoteBackend:
    return RemoteBackend(link, ENGINE, {"image": BASE_IMAGE, "http_timeout_sec": 30})


@pytest.fixture(scope="module")
def sandbox(remote: RemoteBackend) -> Iterator[str]:
    info = remote.create(SandboxSpec(template=BASE_IMAGE, metadata={
        "sandlot_tenant_id": "1", RUN_LABEL: RUN_ID}))
    yield info.id
    remote.delete(info.id)


def test_a_command_s_output_comes_back_live_and_its_result_whole(remote, sandbox):
    seen: list = []
    result = remote.exec(sandbox, "echo one; echo two >&2; exit 3",
                         on_output=lambda stream, chunk: seen.append((stream, chunk)),
                         on_started=seen.append)
    assert (result.stdout, result.stderr, result.exit_code) == ("one\n", "two\n", 3)
    assert isinstance(seen[0], str)  # the handle cancel_exec takes came first
    assert b"".join(c for s, c in seen[1:] if s == 1) == b"one\n"
    assert remote.get(sandbox).state == base.SandboxState.running


def test_a_running_command_is_cancelled_through_the_node(remote, sandbox):
    refs: list[str] = []
    done: dict = {}
    thread = threading.Thread(target=lambda: done.update(result=remote.exec(
        sandbox, "sleep 30", on_started=refs.append, timeout_sec=60)))
    thread.start()
    deadline = time.monotonic() + 10
    while not refs and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert remote.cancel_exec(sandbox, refs[0]) is True
    thread.join(timeout=15)
    assert done["result"].exit_code == 137
    assert "sleep 30" not in remote.exec(sandbox, "ps -eo args").stdout


def test_a_node_stopped_mid_command_finishes_it_for_its_caller(link, sandbox):
    """SIGTERM (`stopping`) while a command runs: the node takes no new call (it leaves
    the live set at once), but the command it took runs to its end and its caller gets
    the result, instead of being told the node stopped while the node goes on running
    it (and lingers until it ends) with nobody to hear the answer."""
    own = Link(link.client, f"test-{uuid.uuid4().hex[:12]}", KEYS)  # this node's alone
    stopping = Node(own, {ENGINE: lambda settings: DockerBackend(
        {**settings, **docker_settings()})}, {"egress_rules": True}, max_calls=2)
    thread = threading.Thread(target=stopping.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not own.live_nodes(ENGINE) and time.monotonic() < deadline:
            time.sleep(0.05)
        remote = RemoteBackend(own, ENGINE, {"image": BASE_IMAGE, "http_timeout_sec": 30})
        refs: list[str] = []
        done: dict = {}

        def run() -> None:
            try:
                done["result"] = remote.exec(sandbox, "sleep 5; echo finished",
                                             on_started=refs.append, timeout_sec=30)
            except BackendError as exc:
                done["error"] = exc

        caller = threading.Thread(target=run)
        caller.start()
        while not refs and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refs, "the command never started"
        stopping.stopping.set()
        time.sleep(1.5)  # the node's loop notices within a second
        assert not own.live_nodes(ENGINE)
        with pytest.raises(EngineWithoutNode):  # a new call is refused at once
            remote.get(sandbox)
        caller.join(timeout=20)
        assert "error" not in done, done
        assert (done["result"].stdout, done["result"].exit_code) == ("finished\n", 0)
        thread.join(timeout=10)
        assert not thread.is_alive(), "the node did not stop once its call ended"
        assert not own.alive(stopping.id, ENGINE)
    finally:
        stopping.stopping.set()
        thread.join(timeout=15)
        for key in link.client.scan_iter(own.prefix + "*"):
            link.client.delete(key)


def test_files_and_typed_errors_cross_the_wire(remote, sandbox):
    remote.write_file(sandbox, "out/a.bin", bytes(range(256)) * 4)
    assert remote.read_file(sandbox, "out/a.bin") == bytes(range(256)) * 4
    assert [e.name for e in remote.list_dir(sandbox, "out")] == ["a.bin"]
    with pytest.raises(SandboxPathNotFound):
        remote.read_file(sandbox, "nope.txt")


def test_a_terminal_is_relayed_and_closing_it_ends_the_shell(remote, sandbox):
    terminal = remote.open_terminal(sandbox, cols=100, rows=30)
    terminal.write(b"echo relay-$((40+2)); stty size\n")
    seen = b""
    deadline = time.monotonic() + 15
    while (b"relay-42" not in seen or b"30 100" not in seen) and time.monotonic() < deadline:
        seen += terminal.read(0.5) or b""
    assert b"relay-42" in seen and b"30 100" in seen
    terminal.write(b"sleep 300 &\n")
    time.sleep(0.5)
    terminal.close()
    deadline = time.monotonic() + 10
    while "sleep 300" in remote.exec(sandbox, "ps -eo args").stdout \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "sleep 300" not in remote.exec(sandbox, "ps -eo args").stdout


def test_the_engine_s_identity_comes_with_the_heartbeat(link, node, remote):
    """A session's every command checks its engine's id: after a node answered it once,
    its heartbeat carries it and callers need no call; nodes that disagree are asked."""
    expected = DockerBackend(docker_settings()).engine_identity()
    assert expected and remote.engine_identity() == expected
    remote.call("engine_identity", {})  # the node learns it from a call, whatever came first
    link.beat(node.id, [ENGINE], node.info)  # its next heartbeat
    quiet = RemoteBackend(link, ENGINE, {})
    quiet.call = lambda *args, **kwargs: pytest.fail("the node was asked")
    assert quiet.engine_identity() == expected
    link.beat("other-node", [ENGINE], {"egress_rules": True, "identities": {ENGINE: "x"}})
    try:
        asked: list[str] = []
        other = RemoteBackend(link, ENGINE, {})
        real = other.call
        other.call = lambda method, args, hooks=None: asked.append(method) or real(
            method, args, hooks)
        assert other.engine_identity() == expected and asked == ["engine_identity"]
    finally:
        link.leave("other-node", [ENGINE])


def test_the_node_uses_its_own_engine_url_whatever_the_caller_sends(link, node, sandbox):
    """A caller cannot point the node at another engine (or a socket of its choosing)."""
    spoofed = RemoteBackend(link, ENGINE, {"image": BASE_IMAGE})
    spoofed.settings["host"] = "unix:///tmp/sandlot-no-engine.sock"
    assert spoofed.get(sandbox).id == sandbox


def test_the_node_calls_only_the_backend_s_methods_on_its_own_engines(link, node, remote):
    with pytest.raises(BackendError, match="not a call a node serves"):
        remote.call("_inspect", {"sandbox_id": "x"})
    with pytest.raises(BackendError, match="not a call a node serves"):
        remote.call("close", {})
    # A message on this node's list that names an engine it does not own.
    call_id = uuid.uuid4().hex
    link.client.rpush(link.key("calls", ENGINE), link.pack({
        "id": call_id, "method": "get", "engine": "other", "settings": codec.encode({}),
        "args": codec.encode({"sandbox_id": "x"}), "hooks": []}))
    answers = []
    while not answers or answers[-1]["t"] == "taken":
        answers.append(link.unpack(link.client.blpop([link.key("reply", call_id)], 10)[1]))
    assert answers[-1]["t"] == "err"
    assert "does not serve the Docker engine 'other'" in answers[-1]["reason"]


def test_the_node_discards_only_its_own_packed_results(remote, tmp_path):
    """An attacker's path (or a file of another kind in the temp dir) is refused."""
    victim = tmp_path / "keep.txt"
    victim.write_text("keep")
    for path in (str(victim), "/etc/passwd",
                 os.path.join(tempfile.gettempdir(), "sandlot-carry-../../etc/passwd")):
        with pytest.raises(BackendError, match="not a packed install result"):
            remote.call("discard_packed", {"path": path})
    assert victim.read_text() == "keep"
    handle, packed = tempfile.mkstemp(prefix="sandlot-carry-", suffix=".tar")
    os.close(handle)
    remote.call("discard_packed", {"path": packed})
    assert not os.path.exists(packed)


def test_garbage_on_the_calls_list_is_dropped_and_the_node_goes_on(link, node, remote, sandbox):
    calls = link.key("calls", ENGINE)
    for junk in (b"not json", b"[1,2]", link.pack({"id": "../x"}),
                 link.pack({"id": "a" * 32, "args": {"$c": "Popen", "f": {}}})):
        link.client.rpush(calls, junk)
    assert remote.get(sandbox).id == sandbox


def _raw_call(method: str, args: dict) -> tuple[str, bytes]:
    call_id = uuid.uuid4().hex
    return call_id, codec.dumps({"id": call_id, "method": method, "engine": ENGINE,
                                 "settings": codec.encode({}), "args": codec.encode(args),
                                 "hooks": []})


@pytest.mark.parametrize("sealing", ["plain", "other-keys", "replayed"])
def test_a_call_not_sealed_now_with_the_deployment_s_keys_runs_nothing(
        link, node, remote, sandbox, sealing):
    """Whoever can write to Redis but holds no key (or replays an old call) cannot make
    the node run a command: the call is dropped unanswered."""
    call_id, plain = _raw_call("exec", {"sandbox_id": sandbox,
                                        "command": "touch /workspace/pwned"})
    raw = {"plain": lambda: plain,
           "other-keys": lambda: Fernet(Fernet.generate_key()).encrypt(plain),
           "replayed": lambda: Fernet(KEYS[0].encode()).encrypt_at_time(
               plain, int(time.time()) - 600)}[sealing]()
    link.client.rpush(link.key("calls", ENGINE), raw)
    assert link.client.blpop([link.key("reply", call_id)], timeout=2) is None
    assert remote.exec(sandbox, "test -e /workspace/pwned || echo clean").stdout == "clean\n"


def test_a_call_the_node_read_but_never_took_up_ends_the_wait(link, monkeypatch):
    """A node whose keys differ drops the call it cannot open: the caller is told."""
    monkeypatch.setattr(remote_client, "PICKUP_SEC", 0.5)
    link.beat("deaf-node", ["deaf"], {"egress_rules": True})
    threading.Thread(target=lambda: link.client.blpop([link.key("calls", "deaf")], 5),
                     daemon=True).start()
    with pytest.raises(BackendUnavailable, match="did not take up the call"):
        RemoteBackend(link, "deaf", {}).get("x")


def test_the_codec_refuses_what_is_not_in_the_protocol():
    class Other:
        pass
    with pytest.raises(codec.WireError):
        codec.encode(Other())
    for bad in ({"$c": "Popen", "f": {}}, {"$e": "Signals", "v": 9}, {"$b": "%%%"},
                {"x": 1}, {"$c": "ExecResult", "f": {"nope": 1}}):
        with pytest.raises(codec.WireError):
            codec.decode(bad)
    spec = SandboxSpec(template="t", metadata={"a": "b"}, network=base.ResolvedNetworkPolicy(
        allow_out=("x.com",), host_rules=(base.HostRule("h", {"k": "v"}),)))
    assert codec.decode(codec.encode(spec)) == spec


def test_an_engine_with_no_live_node_is_refused_at_once(link):
    started = time.monotonic()
    with pytest.raises(EngineWithoutNode, match="No Sandlot node serves the Docker engine"):
        RemoteBackend(link, "nobody", {}).get("x")
    assert time.monotonic() - started < 2


def test_a_call_no_node_takes_is_withdrawn(link, monkeypatch):
    """A node that is live but never takes the call: withdrawn, and nothing runs later."""
    monkeypatch.setattr(remote_client, "PICKUP_SEC", 0.5)
    link.beat("busy-node", ["busy"], {"egress_rules": True})
    with pytest.raises(BackendUnavailable, match="too busy"):
        RemoteBackend(link, "busy", {}).get("x")
    assert link.client.llen(link.key("calls", "busy")) == 0


def test_a_node_that_stops_mid_call_ends_the_wait(link):
    """It took the call and died (no answer, no heartbeat): the caller is told within
    the heartbeat's life, instead of waiting for ever."""
    link.client.zadd(link.key("live", "dying"), {"dying-node": time.time() + 1.5})
    link.client.set(link.key("node", "dying-node"), b'{"egress_rules": true}', ex=30)

    def take() -> None:
        item = link.client.blpop([link.key("calls", "dying")], timeout=5)
        call = link.unpack(item[1])
        link.client.rpush(link.key("reply", call["id"]),
                          link.pack({"t": "taken", "node": "dying-node"}))

    threading.Thread(target=take, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="stopped during the call"):
        RemoteBackend(link, "dying", {}).exec("x", "sleep 100")
    assert time.monotonic() - started < 8
