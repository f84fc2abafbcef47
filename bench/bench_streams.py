"""Install streams: latency from a worker writing an event to an SSE client receiving its
frame (with Redis pub/sub and with database polling), and how many open streams one app
process holds, with what memory and what effect on an ordinary page.

Not a test (nothing asserts a time). The app runs in gunicorn with the project's
gunicorn.conf.py in a subprocess; this process plays the worker (EventLog.emit on the same
SQLite file, publishing to the same Redis) and the clients (httpx, one thread per stream).

    TEST_REDIS_URL=redis://127.0.0.1:56379/0 .venv/bin/python bench/bench_streams.py

Env: BENCH_EVENTS (100) events per latency run; BENCH_NO_DOCS=1 skips docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from flask import Flask  # noqa: E402

from app import create_app  # noqa: E402
from app.extensions import db  # noqa: E402
from app.services.skills.installs.events import EventLog  # noqa: E402

EVENTS = int(os.environ.get("BENCH_EVENTS", "100"))
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Install streams (SSE)"
LOAD_BEFORE = os.getloadavg()[0]


def bench_app(database_url: str, redis_url: str | None) -> Flask:
    return create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": database_url,
                       "REDIS_URL": redis_url, "JOB_QUEUE": "sandlot-bench-unused"})


def served_app() -> Flask:
    """gunicorn's target (`bench.bench_streams:served_app()`)."""
    return bench_app(os.environ["BENCH_DATABASE_URL"], os.environ.get("BENCH_REDIS_URL") or None)


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(database_url: str, redis_url: str | None) -> tuple[subprocess.Popen, str]:
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_DATABASE_URL": database_url,
           "BENCH_REDIS_URL": redis_url or ""}
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    server = subprocess.Popen(
        [gunicorn, "--config", str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}",
         "bench.bench_streams:served_app()"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            if httpx.get(base + "/login", timeout=2).status_code == 200:
                return server, base
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("gunicorn did not start")


def worker_pid(server: subprocess.Popen) -> int:
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    return int(children[0])


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def setup(app: Flask):
    from tests import factories
    from tests.streams.conftest import make_skill, token

    with app.app_context():
        db.create_all()
        group = factories.populate("Bench")
        row = make_skill(group.tenant)
        EventLog(row.tenant_id, row.id, row.install_message_id).emit("accepted", 10)
        return (row.id, row.sandbox_config_id, row.tenant_id, row.install_message_id,
                token(app, group.admin, group.tenant))


class Client:
    """One open stream; records when each frame's `log` marker arrived."""

    def __init__(self, base: str, path: str, headers: dict[str, str]):
        self.arrived: dict[str, float] = {}
        self.status = 0
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(base + path, headers),
                                       daemon=True)
        self.thread.start()

    def _run(self, url: str, headers: dict[str, str]) -> None:
        try:
            with httpx.stream("GET", url, headers=headers, timeout=600) as response:
                self.status = response.status_code
                self.ready.set()
                for line in response.iter_lines():
                    if self.stop.is_set():
                        return
                    if line.startswith("data: "):
                        frame = json.loads(line[6:])
                        self.arrived.setdefault(frame.get("log", ""), time.monotonic())
        except httpx.HTTPError:
            pass
        finally:
            self.ready.set()


def latency(app: Flask, base: str, ids) -> list[float]:
    skill_id, config_id, tenant_id, run_id, headers = ids
    client = Client(base, f"/api/v1/sandbox-configs/{config_id}/skills/{skill_id}/install-events",
                    headers)
    client.ready.wait(10)
    time.sleep(1.0)  # the server's listener is subscribed
    samples = []
    with app.app_context():
        events = EventLog(tenant_id, skill_id, run_id)
        for i in range(EVENTS):
            marker = f"bench-{i}"
            written = time.monotonic()
            events.command(marker, i + 1)
            deadline = time.monotonic() + 5
            while marker not in client.arrived and time.monotonic() < deadline:
                time.sleep(0.0005)
            samples.append(client.arrived.get(marker, float("inf")) - written)
            # A random gap, so writes do not phase-lock to the 1 s poll of the no-Redis path.
            time.sleep(random.uniform(0.02, 1.0))
    client.stop.set()
    return samples


def login_median(base: str, rounds: int = 30) -> float:
    with httpx.Client(base_url=base, timeout=10) as client:
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            client.get("/login")
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def capacity(server: subprocess.Popen, base: str, ids) -> list[tuple[int, float, float, int]]:
    skill_id, config_id, _, _, headers = ids
    path = f"/api/v1/sandbox-configs/{config_id}/skills/{skill_id}/install-events"
    pid = worker_pid(server)
    rows, clients = [], []
    for target in (0, 50, 100, 200, 224, 230):
        while len(clients) < target:
            clients.append(Client(base, path, headers))
        for client in clients:
            client.ready.wait(10)
        time.sleep(1.0)
        open_ok = sum(1 for c in clients if c.status == 200)
        refused = sum(1 for c in clients if c.status == 503)
        rows.append((target, open_ok, refused, rss_mib(pid), login_median(base)))
    for client in clients:
        client.stop.set()
    return rows


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    redis_url = os.environ.get("TEST_REDIS_URL")
    results: dict[str, list[float]] = {}
    cap_rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for label, url in (("Redis pub/sub", redis_url), ("no Redis (database poll, 1 s)", None)):
            if label.startswith("Redis") and not url:
                continue
            database_url = f"sqlite:///{scratch}/{'redis' if url else 'poll'}.db"
            app = bench_app(database_url, url)
            ids = setup(app)
            server, base = start_server(database_url, url)
            try:
                results[label] = latency(app, base, ids)
                if url:
                    cap_rows = capacity(server, base, ids)
            finally:
                server.terminate()
                server.wait(timeout=30)
    load_after = os.getloadavg()[0]
    lines = [SECTION, "",
             f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
             f"- Machine: nproc {os.cpu_count()}, Python {platform.python_version()}, "
             f"{platform.system()} {platform.machine()}; load average {LOAD_BEFORE:.2f} "
             f"before the run, {load_after:.2f} after (shared machine)",
             "- Method: `bench/bench_streams.py`. The app in gunicorn started with the "
             "project's `gunicorn.conf.py` (1 gthread worker, 256 threads) on SQLite; the "
             "bench process writes events with `EventLog.emit` (commit, then the notice) "
             f"like an install worker, {EVENTS} events at random gaps of 20-1000 ms, and "
             "times from just before `emit` to the frame's arrival at an httpx SSE client "
             "(same clock).",
             "", "| Path | Median (ms) | p95 (ms) | Max (ms) |", "|---|---:|---:|---:|"]
    for label, samples in results.items():
        lines.append(f"| {label} | {statistics.median(samples) * 1000:.1f} | "
                     f"{pct(samples, 0.95) * 1000:.1f} | {max(samples) * 1000:.1f} |")
    if cap_rows:
        lines += ["", "Open-stream capacity of one process (Redis run): streams opened, "
                  "answered 200, refused 503 (over `SKILL_STREAMS_MAX` = 224), the worker's "
                  "resident memory, and `GET /login` median while they are open.", "",
                  "| Streams asked | Open | Refused | Worker RSS (MiB) | /login median (ms) |",
                  "|---:|---:|---:|---:|---:|"]
        for target, ok, refused, rss, login in cap_rows:
            lines.append(f"| {target} | {ok} | {refused} | {rss:.1f} | {login * 1000:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if os.environ.get("BENCH_NO_DOCS") != "1":
        doc = DOCS.read_text()
        if SECTION in doc:
            head, _, rest = doc.partition(SECTION)
            tail = rest[rest.find("\n## ") + 1:] if "\n## " in rest else ""
            doc = head + text + ("\n" + tail if tail else "")
        else:
            doc = doc.rstrip("\n") + "\n\n" + text
        DOCS.write_text(doc)


if __name__ == "__main__":
    main()
