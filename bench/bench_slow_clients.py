"""Slow clients against the web process (issue 11 item 1), in one run: GET /login while
N connections have sent half a request head and stalled, for N = 0, 300 and 900, under
gunicorn's stock gthread worker (256 threads) and under the project's worker
(`app.serving.HeaderBufferingWorker`, same threads), both from gunicorn.conf.py.

Reported per worker and N: /login median and p95 over the requests that were answered,
and how many of them timed out (2 s each). Not a test.

    .venv/bin/python bench/bench_slow_clients.py     # BENCH_NO_DOCS=1: print only
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import requests  # noqa: E402
from bench_auth import sqlite_database  # noqa: E402
from bench_exec import seed, serve, write_section  # noqa: E402

WORKERS = {"gthread (stock)": "gthread",
           "HeaderBufferingWorker": "app.serving.HeaderBufferingWorker"}
LEVELS = (0, 300, 900)
ROUNDS = 20
TIMEOUT = 2.0
HALF_HEAD = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Slow clients: page latency while connections stall"
LOAD_BEFORE = os.getloadavg()[0]


def logins(base: str) -> tuple[list[float], int]:
    """/login times (ms) on fresh connections, and how many timed out."""
    samples, timeouts = [], 0
    for _ in range(ROUNDS):
        start = time.perf_counter()
        try:
            # a new connection each time: the accept path is what stalled clients clog
            assert requests.get(f"{base}/login", timeout=TIMEOUT).status_code == 200
            samples.append((time.perf_counter() - start) * 1000)
        except requests.RequestException:
            timeouts += 1
    return samples, timeouts


def level(base: str, count: int) -> tuple[list[float], int]:
    host, port = base.removeprefix("http://").split(":")
    stalled = []
    try:
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(HALF_HEAD)
            stalled.append(sock)
        time.sleep(1.0)
        return logins(base)
    finally:
        for sock in stalled:
            sock.close()
        time.sleep(1.0)


def row(name: str, count: int, samples: list[float], timeouts: int, idle: float) -> str:
    if not samples:
        return f"| {name} | {count} | - | - | - | {timeouts}/{ROUNDS} |"
    ordered = sorted(samples)
    median, p95 = statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return (f"| {name} | {count} | {median:.1f} | {p95:.1f} | {median / idle:.2f}x "
            f"| {timeouts}/{ROUNDS} |")


def main() -> None:
    rows = ["| Worker | Stalled heads | /login median (ms) | /login p95 (ms) | vs idle "
            "| timed out (2 s) |", "|---|---:|---:|---:|---:|---:|"]
    with sqlite_database() as url:
        seed(url)
        for name, worker in WORKERS.items():
            server, base = serve(url, "--worker-class", worker)
            try:
                logins(base)  # warm-up: first requests load templates and pool connections
                results = {count: level(base, count) for count in LEVELS}
            finally:
                server.terminate()
                server.wait(timeout=30)
            idle = statistics.median(results[0][0])
            rows += [row(name, count, *results[count], idle) for count in LEVELS]
    table = "\n".join(rows)
    print(table)
    if not os.environ.get("BENCH_NO_DOCS"):
        body = (f"{SECTION}\n\nMeasured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on "
                f"{os.cpu_count()} cores (load average {LOAD_BEFORE:.1f} before, "
                f"{os.getloadavg()[0]:.1f} after). Method: `bench/bench_slow_clients.py`. "
                "The app under the project's `gunicorn.conf.py` (1 worker, 256 threads, "
                "1000 worker connections) on SQLite, once with gunicorn's stock gthread "
                "worker and once with the project's; N sockets each send half a request "
                f"head and stall, then {ROUNDS} sequential `GET /login` on fresh "
                f"connections, each given {TIMEOUT:.0f} s.\n\n{table}\n\n"
                "Reading: the stock gthread worker gives a connection a thread at its "
                "first byte, and that thread then blocks for the rest of the head; once "
                "the stalled connections outnumber the 256 threads, pages wait until a "
                "stalled client gives up. `app.serving.HeaderBufferingWorker` reads heads "
                "in the worker's event loop and hands a thread only complete requests, so a "
                "stalled connection costs a socket and a small buffer; it is closed 10 s "
                "after its first byte if its head is still incomplete "
                "(`HEADER_TIMEOUT_SEC`). Past 1000 open connections (`worker_connections`) "
                "new ones wait in the listen backlog until the deadline frees slots, so "
                "the bound is connections x 10 s rather than threads x forever.\n")
        write_section(DOCS, SECTION, body)


if __name__ == "__main__":
    main()
