"""Warm exec through the exec agent (issue 29) against raw Docker SDK exec, in one run,
with the agent on and off:

- warm: an exec through the API on a session's running sandbox against a raw
  exec_create/exec_start/exec_inspect of the same argv in that same container
  (bench_exec.raw_run), interleaved;
- throughput: 8 clients, each on its own session, against 8 raw SDK clients on the same
  containers, alternating rounds; commands per second.

The app runs under gunicorn with gunicorn.conf.py on a scratch SQLite database (as
bench_exec.py), once with SANDBOX_EXEC_AGENT=1 and once with 0; each mode gets its own
sessions and its own raw baseline, measured in the same minutes.

    .venv/bin/python bench/bench_agent_exec.py

Env: BENCH_EXEC_N (100) warm execs per mode, BENCH_CLIENT_EXECS (20) execs per client,
BENCH_ROUNDS (3) rounds of 8 clients, BENCH_NO_DOCS=1.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import docker  # noqa: E402
from bench_auth import sqlite_database  # noqa: E402
from bench_exec import (  # noqa: E402
    COMMAND,
    IMAGE,
    THROUGHPUT,
    WARMUP,
    client,
    new_session,
    raw_run,
    seed,
    serve,
    throughput,
    timed,
    write_section,
)

N = int(os.environ.get("BENCH_EXEC_N", "100"))
os.environ.setdefault("BENCH_ROUNDS", "3")
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Exec agent: warm API exec vs raw docker exec, agent on and off"
LOAD_BEFORE = os.getloadavg()[0]


def has_agent(engine: docker.APIClient, container: str) -> bool:
    rows = engine.top(container, ps_args="-eo pid,args").get("Processes") or []
    return any("/opt/sandlot/agent.py" in " ".join(row) for row in rows)


def measure_mode(token: str, url: str, agent: bool) -> dict[str, list[float]]:
    os.environ["SANDBOX_EXEC_AGENT"] = "1" if agent else "0"
    server, base = serve(url)
    try:
        http = client(token)
        configs = {c["name"]: c["id"] for c in
                   http.get(f"{base}/api/v1/sandbox-configs").json()["data"]}
        session_id, container = new_session(http, base, configs["local"])
        engine = docker.APIClient(version="auto", timeout=60)
        assert has_agent(engine, container) is agent, "the agent is not as asked"
        exec_url = f"{base}/api/v1/sessions/{session_id}/exec"

        def api_exec() -> None:
            data = http.post(exec_url, json={"command": COMMAND}).json()["data"]
            assert data["stdout"] == "1\n", data

        def raw_exec() -> None:
            raw_run(engine, container)

        timed(api_exec, WARMUP)
        timed(raw_exec, WARMUP)
        api, raw = [], []
        for _ in range(N):
            api += timed(api_exec, 1)
            raw += timed(raw_exec, 1)
        http.delete(f"{base}/api/v1/sessions/{session_id}")
        rates = throughput(token, base, configs["local"], engine)
        engine.close()
        return {"warm exec via the API": api, "raw docker exec (SDK)": raw, **rates}
    finally:
        server.terminate()
        server.wait(timeout=15)


def report(modes: dict[str, dict[str, list[float]]]) -> str:
    lines = ["| Agent | What | n | Median | p95 | vs raw (same run) |",
             "|---|---|---:|---:|---:|---:|"]
    targets = []
    for mode, results in modes.items():
        med = {name: statistics.median(samples) for name, samples in results.items()}
        for name, samples in results.items():
            unit = "commands/s" if THROUGHPUT in name else "ms"
            p95 = statistics.quantiles(samples, n=100, method="inclusive")[94]
            base = (med[f"raw {THROUGHPUT}"] if THROUGHPUT in name
                    else med["raw docker exec (SDK)"])
            lines.append(f"| {mode} | {name} | {len(samples)} | {med[name]:.1f} {unit} | "
                         f"{p95:.1f} | {med[name] / base:.2f}x |")
        warm = med["warm exec via the API"] / med["raw docker exec (SDK)"]
        rate = med[f"API {THROUGHPUT}"] / med[f"raw {THROUGHPUT}"]
        targets += [f"| {mode} | warm exec vs raw exec | at most 0.5x (stretch 0.3x) | "
                    f"{warm:.2f}x |",
                    f"| {mode} | 8-client throughput vs raw | at least 2x | {rate:.2f}x |"]
    return "\n".join(lines + ["", "| Agent | Target (issue 29) | Goal | This run |",
                              "|---|---|---:|---:|", *targets])


READING = """Reading: with the agent, a warm exec is the API request (session, config,
personal variables, the run pool) and then one connection to the sandbox's agent over a
unix socket in its host directory, which spawns the same `sh -c 'timeout -s KILL ...'`
wrapper and streams its output back in Docker's frame format; no engine round trip at all.
Without it (SANDBOX_EXEC_AGENT=0, the fallback path) the backend makes exec create and exec
start on the engine as before. The raw baseline is always the engine: exec create, start,
and the exec inspect `exec_run` does for the exit code, of the same argv as the sandbox
user in the same container.""".replace("\n", " ")


def main() -> None:
    os.environ["SANDBOX_AGENT_DIR"] = tempfile.mkdtemp(prefix="sandlot-bench-agents-")
    os.environ["SANDBOX_EGRESS_STATE_DIR"] = tempfile.mkdtemp(prefix="sandlot-bench-egress-")
    os.environ.setdefault("SANDBOX_DNS_UPSTREAM", "127.0.0.1:9")
    # 8 clients' sessions, and the warm one still ending: past the default quota of 5
    os.environ.setdefault("QUOTA_LIVE_SANDBOXES_PER_MEMBER", "50")
    modes = {}
    with sqlite_database() as url:
        token = seed(url)
        for mode, agent in (("on", True), ("off", False)):
            modes[mode] = measure_mode(token, url, agent)
    table = report(modes)
    print(table)
    if not os.environ.get("BENCH_NO_DOCS"):
        load = (f"load average {LOAD_BEFORE:.1f} before, {os.getloadavg()[0]:.1f} after, "
                f"on {os.cpu_count()} cores")
        body = (f"{SECTION}\n\nMeasured {datetime.now(UTC):%Y-%m-%d} on {os.cpu_count()} "
                f"cores, Python {platform.python_version()}; command `{COMMAND}` in "
                f"`{IMAGE}`; gunicorn with gunicorn.conf.py on SQLite (WAL); medians of "
                f"interleaved runs; {load}.\n\n{table}\n\n{READING}\n")
        write_section(DOCS, SECTION, body)


if __name__ == "__main__":
    main()
