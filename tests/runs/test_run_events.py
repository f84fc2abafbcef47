"""A run's event stream over real HTTP: output chunks as the command prints them, then
one final frame; a finished run replays its output and verdict at once."""

from __future__ import annotations

from tests.runs.conftest import wait_run
from tests.streams.conftest import read_stream, token


def test_events_stream_output_live_then_the_verdict(app, world, short_wait, serve):
    base, headers = serve(app), token(app, world.a.contributor, world.a.tenant)
    headers["Accept-Encoding"] = "br, gzip"  # offered: an event stream must not take it
    run = world.member.post(world.url("/exec"), json={
        "command": "echo one; sleep 1.5; echo two >&2; sleep 1.5; echo three"}).json["data"]
    assert run["status"] == "running"
    stream = read_stream(base, world.url(f"/runs/{run['id']}/events"), headers, limit=30)
    assert stream.status == 200 and "content-encoding" not in stream.headers
    first = stream.wait_frames(1, 10)[0]
    assert first == {"stream": "stdout", "text": "one\n"}
    assert not stream.ended.is_set(), "the stream ended while the command ran"
    assert stream.ended.wait(20)
    texts = [(f["stream"], f["text"]) for f in stream.frames if "text" in f]
    assert "".join(t for name, t in texts if name == "stdout") == "one\nthree\n"
    assert "".join(t for name, t in texts if name == "stderr") == "two\n"
    assert texts.index(("stderr", "two")) < texts.index(("stdout", "three\n"))  # live
    final = stream.frames[-1]
    assert final["done"] is True and final["status"] == "succeeded" and final["exit_code"] == 0
    assert stream.arrived[-1] - stream.arrived[0] > 2  # frames came as the output did
    replay = read_stream(base, world.url(f"/runs/{run['id']}/events"), headers, limit=10)
    assert replay.ended.wait(5)
    assert [f.get("text") for f in replay.frames[:-1]] == ["one\nthree\n", "two\n"]
    assert replay.frames[-1]["status"] == "succeeded"
    assert wait_run(world.member, world, run["id"])["status"] == "succeeded"
