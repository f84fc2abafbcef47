"""The exec stream reader on a socket pair: demultiplexing, caps and the host deadline."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

from app.backends.docker.io import HEADER, read_exec


def frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def fake_response(sock: socket.socket) -> SimpleNamespace:
    reader = sock.makefile("rb")
    return SimpleNamespace(raw=SimpleNamespace(_fp=SimpleNamespace(fp=reader)),
                           close=reader.close)


def serve(chunks: list[bytes], hold: float = 0.0) -> socket.socket:
    ours, theirs = socket.socketpair()

    def feed():
        for chunk in chunks:
            theirs.sendall(chunk)
            time.sleep(0.01)
        time.sleep(hold)
        theirs.close()

    threading.Thread(target=feed, daemon=True).start()
    return ours


def test_frames_split_anywhere_are_demultiplexed():
    data = frame(1, b"out-1 ") + frame(2, b"err") + frame(1, b"out-2")
    chunks = [data[i:i + 3] for i in range(0, len(data), 3)]

    out, err, truncated, hit = read_exec(fake_response(serve(chunks)), time.monotonic() + 5,
                                         limit=100)

    assert (out, err, truncated, hit) == (b"out-1 out-2", b"err", False, False)


def test_each_stream_is_capped_and_the_rest_drained():
    chunks = [frame(1, b"x" * 700), frame(1, b"y" * 700), frame(2, b"e" * 10)]

    out, err, truncated, _ = read_exec(fake_response(serve(chunks)), time.monotonic() + 5,
                                       limit=1000)

    assert out == b"x" * 700 + b"y" * 300
    assert err == b"e" * 10
    assert truncated


def test_the_host_deadline_ends_a_stream_that_stays_open():
    started = time.monotonic()

    out, _, _, hit = read_exec(fake_response(serve([frame(1, b"partial")], hold=30)),
                               started + 0.5, limit=100)

    assert hit and out == b"partial"
    assert time.monotonic() - started < 2


def test_exit_marker_is_split_off_stderr():
    from app.backends.docker.io import take_exit_marker

    marker = "\n.sandlot-exit-0123456789abcdef:"
    assert take_exit_marker(b"oops" + marker.encode() + b"3", marker, 100) == (b"oops", 3, False)
    # A command's own text before the real marker (it cannot know the token) stays.
    forged = b"\n.sandlot-exit-guess:0"
    assert take_exit_marker(forged + marker.encode() + b"7", marker, 100) == (forged, 7, False)
    # Over the limit: capped, and said so; no marker at all: no code (ask the engine).
    assert take_exit_marker(b"x" * 10 + marker.encode() + b"0", marker, 4) == (b"xxxx", 0, True)
    assert take_exit_marker(b"partial", marker, 100) == (b"partial", None, False)
