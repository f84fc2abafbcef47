"""Warm exec through the exec agent (issue 29) against raw Docker SDK exec, in one run,
with the agent on and off:

- warm: an exec through the API on a session's running sandbox against a raw
  exec_create/exec_start/exec_inspect of the same argv in that same container
  (bench_exec.raw_run), interleaved;
- throughput: 8 clients, each on its own session, against 8 raw SDK clients on the same
  containers, alternating rounds; commands per second;
- first command (issue 29 item 2): a new session's first exec on a config with a warm pool
  of 2 (the app's own keeper refills it between rounds), against a raw cold
  create-start-exec of the same image with the same hardening and no network (SDK),
  interleaved; both against the warm exec above.

The app runs under gunicorn with gunicorn.conf.py on a scratch SQLite database (as
bench_exec.py), once with SANDBOX_EXEC_AGENT=1 and once with 0; each mode gets its own
sessions and its own raw baseline, measured in the same minutes.

    .venv/bin/python bench/bench_agent_exec.py

Env: BENCH_EXEC_N (100) warm execs per mode, BENCH_CLIENT_EXECS (20) execs per client,
BENCH_ROUNDS (3) rounds of 8 clients, BENCH_FIRST_N (10) first commands per mode,
BENCH_NO_DOCS=1.
"""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import docker  # noqa: E402
from bench_auth import sqlite_database  # noqa: E402
from bench_exec import (  # noqa: E402
    ARGV,
    COMMAND,
    HARDENING,
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
FIRST_N = int(os.environ.get("BENCH_FIRST_N", "10"))
FIRST = "first command, new session, warm pool"
COLD = "raw cold create, start and exec (SDK)"
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
        firsts = first_commands(http, base, configs["pooled"], engine, url)
        engine.close()
        return {"warm exec via the API": api, "raw docker exec (SDK)": raw, **rates, **firsts}
    finally:
        server.terminate()
        server.wait(timeout=15)


def ready_in_pool(url: str, config_id: str) -> int:
    with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=10) as conn:
        return conn.execute("SELECT count(*) FROM pool_sandboxes WHERE config_id = ? AND "
                            "state = 'ready'", (config_id,)).fetchone()[0]


def first_commands(http, base: str, config_id: str, engine: docker.APIClient,
                   url: str) -> dict[str, list[float]]:
    """A new session's first command with a warm pool against a raw cold create-and-exec,
    interleaved; the pool is full again (the app's keeper) before each first command."""
    pooled, cold, served = [], [], []
    sessions_url = f"{base}/api/v1/sessions"

    def wait_full() -> None:
        deadline = time.monotonic() + 60
        while ready_in_pool(url, config_id) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the warm pool did not refill in 60 s")
            time.sleep(0.05)

    def first() -> None:
        session_id = http.post(sessions_url, json={"sandbox_config_id": config_id}
                               ).json()["data"]["id"]
        wait_full()
        start = time.perf_counter()
        data = http.post(f"{sessions_url}/{session_id}/exec", json={"command": COMMAND}
                         ).json()["data"]
        pooled.append((time.perf_counter() - start) * 1000)
        assert data["stdout"] == "1\n", data
        served.append(data["sandbox_id"])
        http.delete(f"{sessions_url}/{session_id}")

    def raw_cold() -> None:
        start = time.perf_counter()
        created = engine.create_container(
            IMAGE, command=["sleep", "infinity"], user="sandbox",
            host_config=engine.create_host_config(network_mode="none", **HARDENING))
        engine.start(created["Id"])
        exec_id = engine.exec_create(created["Id"], ARGV, user="sandbox")["Id"]
        assert engine.exec_start(exec_id) == b"1\n"
        assert engine.exec_inspect(exec_id)["ExitCode"] == 0
        cold.append((time.perf_counter() - start) * 1000)
        engine.remove_container(created["Id"], force=True)

    first()  # the first session starts the pool (off until a session of its config opens)
    pooled.clear()
    for _ in range(FIRST_N):
        first()
        raw_cold()
    labels = {s["Labels"].get("sandlot_purpose") for s in engine.containers(
        all=True, filters={"label": "sandlot_purpose"}) if s["Id"] in served}
    assert labels <= {"pool"}, f"first commands were not served by the pool: {labels}"
    return {FIRST: pooled, COLD: cold}


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
                    else med[COLD] if name in (FIRST, COLD) else med["raw docker exec (SDK)"])
            lines.append(f"| {mode} | {name} | {len(samples)} | {med[name]:.1f} {unit} | "
                         f"{p95:.1f} | {med[name] / base:.2f}x |")
        warm = med["warm exec via the API"] / med["raw docker exec (SDK)"]
        rate = med[f"API {THROUGHPUT}"] / med[f"raw {THROUGHPUT}"]
        first = med[FIRST]
        targets += [f"| {mode} | warm exec vs raw exec | at most 0.5x (stretch 0.3x) | "
                    f"{warm:.2f}x |",
                    f"| {mode} | 8-client throughput vs raw | at least 2x | {rate:.2f}x |",
                    f"| {mode} | first command with a warm pool vs warm exec via the API | "
                    f"at most 2x | {first / med['warm exec via the API']:.2f}x |",
                    f"| {mode} | first command with a warm pool vs raw cold create-and-exec"
                    f" | at most 0.3x | {first / med[COLD]:.2f}x |"]
    return "\n".join(lines + ["", "| Agent | Target (issue 29) | Goal | This run |",
                              "|---|---|---:|---:|", *targets])


READING = """Reading: with the agent, a warm exec is the API request (session, config,
personal variables, the run pool) and then one connection to the sandbox's agent over a
unix socket in its host directory, which spawns the same `sh -c 'timeout -s KILL ...'`
wrapper and streams its output back in Docker's frame format; no engine round trip at all.
Without it (SANDBOX_EXEC_AGENT=0, the fallback path) the backend makes exec create and exec
start on the engine as before. The raw baseline is always the engine: exec create, start,
and the exec inspect `exec_run` does for the exit code, of the same argv as the sandbox
user in the same container. A first command with a warm pool is the session's claim of a
started sandbox (one conditional UPDATE, a look at the container, the binding) and then a
warm exec; its "vs raw" column is against the raw cold create, start and exec of the same
image and argv with no network, the work a pool takes off the first command.""".replace("\n", " ")


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
