"""Session persistence: a warm exec through the API against a raw `docker exec` of the same
command via the SDK, and against a fresh container per command.

Not a test. The app runs under gunicorn (1 worker, 8 threads, as `make run`) on a scratch
SQLite database, with a Docker config on the local engine and image sandlot/sandbox:base.
The session's first exec creates its container; the timed execs reuse it. The raw
baseline runs the same command in that same container through the docker SDK's
exec_create/exec_start; the fresh baseline creates, starts, execs and removes a container
of the same image for every command (what a per-command sandbox costs).

    .venv/bin/python bench/bench_exec.py        # or: make bench

Env: BENCH_EXEC_N (200) warm execs, BENCH_FRESH_N (20) fresh containers, BENCH_NO_DOCS=1.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import docker  # noqa: E402
import requests  # noqa: E402
from bench_auth import SECRET_KEY, SECRETS_KEY, free_port, sqlite_database  # noqa: E402

N = int(os.environ.get("BENCH_EXEC_N", "200"))
FRESH_N = int(os.environ.get("BENCH_FRESH_N", "20"))
WARMUP = 10
IMAGE = "sandlot/sandbox:base"
COMMAND = "python3 -c 'print(1)'"
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Session exec: warm API exec vs raw docker exec vs a fresh container"
LOAD_BEFORE = os.getloadavg()[0]


def served_app():
    """gunicorn's target (`bench_exec:served_app()`)."""
    from app import create_app

    return create_app({"ENV": "production", "SECRET_KEY": SECRET_KEY,
                       "SECRETS_KEYS": [SECRETS_KEY],
                       "SQLALCHEMY_DATABASE_URI": os.environ["BENCH_DATABASE_URL"]})


def seed(database_url: str) -> str:
    """A workspace with an admin and a Docker config; returns a bearer token."""
    from app.extensions import db
    from app.models import Role
    from app.security import tokens
    from app.services import audit, sandbox_configs, users

    os.environ["BENCH_DATABASE_URL"] = database_url
    app = served_app()
    with app.app_context():
        db.create_all()
        tenant = users.create_tenant("Bench")
        user = users.create_user("admin@bench.test", "correct-horse-battery")
        users.grant(tenant, user, Role.admin)
        db.session.commit()
        sandbox_configs.create_config(tenant, audit.SystemActor("bench"), "local", "", {
            "sandbox_type": "docker", "docker": {"image": IMAGE, "network_mode": "none"}})
        token, _ = tokens.issue(tokens.TokenClaims(user.id, tenant.id, user.session_version),
                                SECRET_KEY, 3600)
        return token


def serve(database_url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [str(Path(sys.executable).with_name("gunicorn")), "--workers", "1", "--threads",
               "8", "--bind", f"127.0.0.1:{port}", "--pythonpath", f"{ROOT},{ROOT / 'bench'}",
               "--log-level", "warning", "bench_exec:served_app()"]
    server = subprocess.Popen(command, cwd=ROOT,
                              env={**os.environ, "BENCH_DATABASE_URL": database_url})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.get(f"{base}/api/v1/openapi.json", timeout=2)
            return server, base
        except requests.RequestException:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("gunicorn did not start")


def timed(fn, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def measure(base: str, token: str) -> dict[str, list[float]]:
    http = requests.Session()
    http.trust_env = False
    http.headers["Authorization"] = f"Bearer {token}"
    config_id = http.get(f"{base}/api/v1/sandbox-configs").json()["data"][0]["id"]
    session_id = http.post(f"{base}/api/v1/sessions",
                           json={"sandbox_config_id": config_id}).json()["data"]["id"]
    exec_url = f"{base}/api/v1/sessions/{session_id}/exec"
    first = http.post(exec_url, json={"command": COMMAND}).json()["data"]
    assert first["stdout"] == "1\n", first
    container = first["sandbox_id"]
    engine = docker.APIClient(version="auto", timeout=60)

    def api_exec():
        data = http.post(exec_url, json={"command": COMMAND}).json()["data"]
        assert data["reused"] and data["stdout"] == "1\n", data

    def raw_exec():
        exec_id = engine.exec_create(container, ["sh", "-c", COMMAND], user="sandbox")["Id"]
        assert engine.exec_start(exec_id) == b"1\n"

    def fresh_container():
        created = engine.create_container(
            IMAGE, command=["sleep", "infinity"],
            host_config=engine.create_host_config(network_mode="none", cap_drop=["ALL"],
                                                  init=True))
        try:
            engine.start(created["Id"])
            exec_id = engine.exec_create(created["Id"], ["sh", "-c", COMMAND])["Id"]
            assert engine.exec_start(exec_id) == b"1\n"
        finally:
            engine.remove_container(created["Id"], force=True)

    timed(api_exec, WARMUP)
    timed(raw_exec, WARMUP)
    api, raw = [], []
    for _ in range(N):  # interleaved, so drift hits both alike
        api += timed(api_exec, 1)
        raw += timed(raw_exec, 1)
    fresh = timed(fresh_container, FRESH_N)
    http.delete(f"{base}/api/v1/sessions/{session_id}")
    engine.close()
    return {"warm exec via the API": api, "raw docker exec (SDK)": raw,
            "fresh container per command": fresh}


def report(results: dict[str, list[float]]) -> str:
    raw = statistics.median(results["raw docker exec (SDK)"])
    lines = ["| What | n | Median (ms) | p95 (ms) | Median vs raw exec |",
             "|---|---:|---:|---:|---:|"]
    for name, samples in results.items():
        p95 = statistics.quantiles(samples, n=100, method="inclusive")[94]
        lines.append(f"| {name} | {len(samples)} | {statistics.median(samples):.1f} | "
                     f"{p95:.1f} | {statistics.median(samples) / raw:.2f}x |")
    api = statistics.median(results["warm exec via the API"])
    fresh = statistics.median(results["fresh container per command"])
    lines.append("")
    lines.append(f"Session persistence buys a **{fresh / api:.1f}x** speedup over a fresh "
                 f"container per command; the API adds {api - raw:.1f} ms over a raw exec.")
    return "\n".join(lines)


def write_docs(table: str) -> None:
    body = (f"{SECTION}\n\nMeasured {datetime.now(UTC):%Y-%m-%d} on {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average before the run "
            f"{LOAD_BEFORE:.1f}; command `{COMMAND}` in `{IMAGE}`; gunicorn 1x8 on "
            f"SQLite; medians of interleaved runs.\n\n{table}\n\nReading: a warm exec is one "
            "authenticated request, two small reads of the session and config, a `docker "
            "inspect` to confirm the container is running, and the exec itself; the raw "
            "baseline is only the exec. A fresh container pays create, start and removal on "
            "every command, which is what a session's persistent sandbox avoids.\n")
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + body + (text[end + 1:] if end != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    DOCS.write_text(text)


def main() -> None:
    with sqlite_database() as url:
        token = seed(url)
        server, base = serve(url)
        try:
            results = measure(base, token)
        finally:
            server.terminate()
            server.wait(timeout=15)
    table = report(results)
    print(table)
    if not os.environ.get("BENCH_NO_DOCS"):
        write_docs(table)


if __name__ == "__main__":
    main()
