"""Slow or idle clients cannot exhaust the app (issue 11 item 1): against a real gunicorn
started with the project's gunicorn.conf.py, as `make run` serves it.

Before app/serving.py, gthread gave each connection a thread at its first byte; 300
connections that sent half a header and stalled held all 256 threads, and GET /login
waited until they gave up (the test's 10 s timeout)."""

from __future__ import annotations

import socket
import statistics
import time

import httpx
import pytest

from app import serving as worker
from tests import serving

STALLED = 300
HALF_HEAD = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"


@pytest.fixture
def gunicorn(db_url, redis_url):
    with serving.gunicorn("tests.streams.server_app:make_app()", db_url, redis_url) as base:
        yield base


def _open(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_300_half_sent_heads_leave_login_fast(app, gunicorn):
    idle = serving.login_latency(gunicorn)
    stalled = []
    try:
        for _ in range(STALLED):
            sock = _open(gunicorn)
            sock.sendall(HALF_HEAD)
            stalled.append(sock)
        time.sleep(1)  # every half head is in the server's hands
        samples = []
        with httpx.Client(base_url=gunicorn, timeout=10) as client:
            for _ in range(30):
                started = time.perf_counter()
                assert client.get("/login").status_code == 200
                samples.append(time.perf_counter() - started)
        # and a fresh connection per request, which must be accepted past the stalled ones
        for _ in range(10):
            started = time.perf_counter()
            assert httpx.get(gunicorn + "/login", timeout=10).status_code == 200
            samples.append(time.perf_counter() - started)
    finally:
        for sock in stalled:
            sock.close()
    busy = statistics.median(samples)
    print(f"GET /login median: idle {idle * 1000:.1f} ms, with {STALLED} stalled heads "
          f"{busy * 1000:.1f} ms, slowest {max(samples) * 1000:.1f} ms")
    serving.assert_pages_stay_fast(idle, busy)
    assert max(samples) < 2, samples


def test_a_head_that_never_ends_is_closed_at_its_deadline(app, gunicorn):
    sock = _open(gunicorn)
    try:
        sock.sendall(HALF_HEAD)
        sock.settimeout(worker.HEADER_TIMEOUT_SEC + 5)
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed, no answer
        waited = time.monotonic() - started
    finally:
        sock.close()
    assert worker.HEADER_TIMEOUT_SEC - 1 <= waited <= worker.HEADER_TIMEOUT_SEC + 3, waited


def test_a_slow_but_live_client_is_served(app, gunicorn):
    """A request whose head and body arrive in pieces, with pauses, is answered whole,
    and the kept-alive connection serves a second request the same way."""
    sock = _open(gunicorn)
    try:
        body = b'{"email": "nobody@example.com", "password": "not-the-password"}'
        head = (b"POST /api/v1/auth/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        for piece in (head[:20], head[20:], body[:10], body[10:]):
            sock.sendall(piece)
            time.sleep(0.3)
        first = _response(sock)
        # 401, not 400: the whole JSON body reached the app and was judged
        assert first.startswith(b"HTTP/1.1 401"), first[:300]
        get = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        sock.sendall(get[:15])
        time.sleep(0.5)
        sock.sendall(get[15:])
        second = _response(sock)
        assert second.startswith(b"HTTP/1.1 200"), second[:200]
    finally:
        sock.close()


def _response(sock: socket.socket) -> bytes:
    """One whole response (head and Content-Length body) from `sock`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return head + b"\r\n\r\n" + body
