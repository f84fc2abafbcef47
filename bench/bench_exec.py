"""Session exec against raw Docker SDK calls, in one run (issue 11 item 7):

- warm: an exec through the API on a session's running sandbox against a raw exec of the
  same argv (`timeout -s KILL 60 sh -c ...`, with the exit code read back as the SDK's
  `exec_run` does) in that same container;
- cold, policed: a new session on a config with a network policy (own network, nft rules,
  the DNS resolver, a disk of its own) and its first command, against the same through
  the SDK: a container on a new bridge network, started, and the command run;
- throughput: 8 clients, each on its own session, against 8 raw clients on the same
  containers; commands per second;
- a fresh container per command, as before.

Not a test. The app runs under gunicorn with gunicorn.conf.py (as `make run`) on a scratch
SQLite database, with a Docker config on the local engine and image sandlot/sandbox:base.
The session's first exec creates its container; the timed execs reuse it. The raw
baseline runs the same command in that same container through the docker SDK's
exec_create/exec_start; the fresh baseline creates, starts, execs and removes a container
of the same image for every command (what a per-command sandbox costs).

    .venv/bin/python bench/bench_exec.py        # or: make bench

Env: BENCH_EXEC_N (200) warm execs, BENCH_FRESH_N (20) fresh containers, BENCH_COLD_N (10)
cold starts, BENCH_CLIENT_EXECS (20) execs per client, BENCH_ROUNDS (5) rounds of 8 clients,
BENCH_NO_DOCS=1. Policed cold starts need root, nftables and the local engine (as the app
does); they use a private egress state directory and a closed upstream (no DNS leaves the
machine).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
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
COLD_N = int(os.environ.get("BENCH_COLD_N", "10"))
CLIENTS = 8
CLIENT_EXECS = int(os.environ.get("BENCH_CLIENT_EXECS", "20"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
ARGV = ["timeout", "-s", "KILL", "60", "sh", "-c", "python3 -c 'print(1)'"]
HARDENING = {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "init": True}
WARMUP = 10
IMAGE = "sandlot/sandbox:base"
COMMAND = "python3 -c 'print(1)'"
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Session exec: warm API exec vs raw docker exec vs a fresh container"
THROUGHPUT = "throughput, 8 clients (commands/s)"
LOAD_BEFORE = os.getloadavg()[0]


def served_app():
    """gunicorn's target (`bench_exec:served_app()`)."""
    from app import create_app

    # bench_runs raises the run pool's caps to hold 200 commands at once
    caps = {name: int(os.environ[f"BENCH_{name}"])
            for name in ("RUNS_MAX", "RUNS_PER_TENANT_MAX", "RUNS_PER_MEMBER")
            if os.environ.get(f"BENCH_{name}")}
    return create_app({"ENV": "production", "SECRET_KEY": SECRET_KEY,
                       "SECRETS_KEYS": [SECRETS_KEY],
                       "SQLALCHEMY_DATABASE_URI": os.environ["BENCH_DATABASE_URL"],
                       "SANDBOX_BACKENDS": ["docker"], **caps})  # opt-in in production


def seed(database_url: str) -> str:
    """A workspace with an admin and a Docker config; returns a bearer token."""
    from app.extensions import db
    from app.models import Role
    from app.security import tokens
    from app.services import audit
    from app.services.identity import users
    from app.services.sandboxes import configs as sandbox_configs

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
        sandbox_configs.create_config(tenant, audit.SystemActor("bench"), "policed", "", {
            "sandbox_type": "docker", "docker": {"image": IMAGE},
            "network": {"deny_out": ["203.0.113.7"]}})
        sandbox_configs.create_config(tenant, audit.SystemActor("bench"), "pooled", "", {
            "sandbox_type": "docker", "docker": {"image": IMAGE, "network_mode": "none",
                                                 "warm_pool_size": 2}})
        token, _ = tokens.issue(tokens.TokenClaims(user.id, tenant.id, user.session_version),
                                SECRET_KEY, 3600)
        return token


def serve(database_url: str, *options: str) -> tuple[subprocess.Popen, str]:
    """The app under gunicorn with gunicorn.conf.py (`options` override it)."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("gunicorn")), "--config",
               str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}",
               "--pythonpath", f"{ROOT},{ROOT / 'bench'}", "--log-level", "warning",
               *options, "bench_exec:served_app()"]
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
    http = client(token)
    configs = {c["name"]: c["id"] for c in
               http.get(f"{base}/api/v1/sandbox-configs").json()["data"]}
    session_id, container = new_session(http, base, configs["local"])
    exec_url = f"{base}/api/v1/sessions/{session_id}/exec"
    engine = docker.APIClient(version="auto", timeout=60)

    def api_exec():
        data = http.post(exec_url, json={"command": COMMAND}).json()["data"]
        assert data["reused"] and data["stdout"] == "1\n", data

    def raw_exec():
        raw_run(engine, container)

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
    results = {"warm exec via the API": api, "raw docker exec (SDK)": raw,
               "fresh container per command": fresh}
    results.update(cold_starts(http, base, configs["policed"], engine))
    results.update(throughput(token, base, configs["local"], engine))
    engine.close()
    return results


def client(token: str) -> requests.Session:
    http = requests.Session()
    http.trust_env = False
    http.headers["Authorization"] = f"Bearer {token}"
    return http


def new_session(http: requests.Session, base: str, config_id: str) -> tuple[str, str]:
    """A session and its sandbox (made by its first command): (session id, container)."""
    session_id = http.post(f"{base}/api/v1/sessions",
                           json={"sandbox_config_id": config_id}).json()["data"]["id"]
    first = http.post(f"{base}/api/v1/sessions/{session_id}/exec",
                      json={"command": COMMAND}).json()["data"]
    while first.get("status") == "running":  # a 202: the first create outlived the wait
        time.sleep(0.2)
        first = http.get(f"{base}/api/v1/sessions/{session_id}/runs/{first['id']}"
                         ).json()["data"]
    assert first["stdout"] == "1\n", first
    if "sandbox_id" not in first:  # a run's record: the session knows its sandbox
        first = http.get(f"{base}/api/v1/sessions/{session_id}").json()["data"]
    return session_id, first["sandbox_id"]


def raw_run(engine: docker.APIClient, container: str) -> None:
    """The backend's argv through the SDK, exit code read back as `exec_run` does."""
    exec_id = engine.exec_create(container, ARGV, user="sandbox")["Id"]
    assert engine.exec_start(exec_id) == b"1\n"
    assert engine.exec_inspect(exec_id)["ExitCode"] == 0


def cold_starts(http: requests.Session, base: str, config_id: str,
                engine: docker.APIClient) -> dict[str, list[float]]:
    """Policed cold start through the API against the SDK on a new bridge network."""
    api, raw = [], []

    def api_cold() -> None:
        start = time.perf_counter()
        session_id, _ = new_session(http, base, config_id)
        api.append((time.perf_counter() - start) * 1000)
        http.delete(f"{base}/api/v1/sessions/{session_id}")

    def raw_cold() -> None:
        name = f"bench-cold-{os.getpid()}-{len(raw)}"
        start = time.perf_counter()
        engine.create_network(name, driver="bridge")
        created = engine.create_container(
            IMAGE, command=["sleep", "infinity"],
            host_config=engine.create_host_config(network_mode=name, **HARDENING))
        engine.start(created["Id"])
        raw_run(engine, created["Id"])
        raw.append((time.perf_counter() - start) * 1000)
        engine.remove_container(created["Id"], force=True)
        engine.remove_network(name)

    api_cold()  # the first policed create starts the resolver: not a typical create
    api.clear()
    for _ in range(COLD_N):
        api_cold()
        raw_cold()
    return {"policed cold start via the API": api, "raw cold start, own network (SDK)": raw}


def throughput(token: str, base: str, config_id: str,
               engine: docker.APIClient) -> dict[str, list[float]]:
    """Commands per second with 8 concurrent clients, each on its own session."""
    sessions = [new_session(client(token), base, config_id) for _ in range(CLIENTS)]

    def run(work, ready=None) -> float:
        barrier = threading.Barrier(CLIENTS + 1)
        failed: list[BaseException] = []

        def one(index: int) -> None:
            try:
                if ready is not None:
                    ready(index)  # outside the clock
                barrier.wait()
                for _ in range(CLIENT_EXECS):
                    work(index)
            except BaseException as exc:  # noqa: BLE001 - reported below, never uncounted
                failed.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        if failed:  # a rate that counts commands that never ran would be a lie
            raise RuntimeError(f"{len(failed)} clients failed: {failed[0]!r}")
        return CLIENTS * CLIENT_EXECS / (time.perf_counter() - start)

    clients = [client(token) for _ in range(CLIENTS)]

    def api(index: int) -> None:
        url = f"{base}/api/v1/sessions/{sessions[index][0]}/exec"
        data = clients[index].post(url, json={"command": COMMAND}).json()["data"]
        assert data["stdout"] == "1\n", data

    def raw(index: int) -> None:
        raw_run(engine, sessions[index][1])

    def fresh(index: int) -> None:
        # The raw round leaves the clients idle past gunicorn's keepalive (5 s): a request
        # sent as the server closes the idle connection is lost. One untimed request first
        # gives each client a live connection.
        clients[index].get(f"{base}/api/v1/sessions/{sessions[index][0]}")

    api_rates, raw_rates = [], []
    for _ in range(ROUNDS):  # alternated, so drift hits both alike
        api_rates.append(run(api, fresh))
        raw_rates.append(run(raw))
    for session_id, _ in sessions:
        clients[0].delete(f"{base}/api/v1/sessions/{session_id}")
    return {f"API {THROUGHPUT}": api_rates, f"raw {THROUGHPUT}": raw_rates}


def report(results: dict[str, list[float]]) -> str:
    med = {name: statistics.median(samples) for name, samples in results.items()}
    raw = med["raw docker exec (SDK)"]
    lines = ["| What | n | Median (ms) | p95 (ms) | Median vs raw exec |",
             "|---|---:|---:|---:|---:|"]
    for name, samples in results.items():
        if THROUGHPUT in name:
            continue
        p95 = statistics.quantiles(samples, n=100, method="inclusive")[94]
        lines.append(f"| {name} | {len(samples)} | {med[name]:.1f} | "
                     f"{p95:.1f} | {med[name] / raw:.2f}x |")
    api, fresh = med["warm exec via the API"], med["fresh container per command"]
    cold = med["policed cold start via the API"] / med["raw cold start, own network (SDK)"]
    rate = med[f"API {THROUGHPUT}"] / med[f"raw {THROUGHPUT}"]
    lines += ["", "| Target (issue 11) | Goal | This run |", "|---|---:|---:|",
              f"| warm exec vs raw exec | at most 1.15x | {api / raw:.2f}x |",
              f"| policed cold start vs raw cold start | at most 1.3x | {cold:.2f}x |",
              f"| 8-client throughput vs raw ({med[f'API {THROUGHPUT}']:.1f} vs "
              f"{med[f'raw {THROUGHPUT}']:.1f} commands/s, medians of {ROUNDS}) | at least 0.9x "
              f"| {rate:.2f}x |", "",
              f"Session persistence buys a **{fresh / api:.1f}x** speedup over a fresh "
              f"container per command; the API adds {api - raw:.1f} ms over a raw exec."]
    return "\n".join(lines)


READING = """Reading: a warm exec is one authenticated request that reads the session, the
config and the caller's personal variables once and hands what it read to the run pool's
thread (which reads only the session row again), then exec create, exec start and the
command. No `docker inspect` runs on a warm exec: the engine's look at the running
container (taken by an inspect, renewed by every exec created in it, kept 2 s and shared by
the process's backends for that engine) answers the session's check; if the container was
paused, stopped or removed since, the exec create is refused before anything runs and the
session looks again, resuming or replacing the sandbox. The exit code comes back on the
exec's own stream, so no exec inspect follows; then one commit stores the finished run and
counts the exec on the session (a run is written before it ends only when it outlives the
request's wait). The raw baseline is the same argv through the SDK (create, start, then the
exec inspect `exec_run` does for the exit code). Before issue 11 a warm exec built a Docker
client per request (a `GET /version`) and inspected the container twice. A policed cold
start is `POST /sessions` plus the first exec: the sandbox's own network, its nft rules, the
DNS resolver told directly (SIGUSR1) and probed until it answers, its loop-mounted disk
(made while the network is), then create, start and the command; the raw side creates a
bridge network and a container on it, starts it and runs the command. Throughput: 8
clients, each on its own session, for 20 commands each, against 8 raw SDK clients on the
same 8 containers, alternating rounds. A fresh container pays create, start and removal
on every command, which is what a session's persistent sandbox avoids.""".replace("\n", " ")


def write_docs(table: str) -> None:
    load = (f"load average {LOAD_BEFORE:.1f} before the run, {os.getloadavg()[0]:.1f} after "
            f"(the after figure includes this run's own 8 clients), on {os.cpu_count()} cores")
    if LOAD_BEFORE >= (os.cpu_count() or 1):  # other work already filled the cores
        load = (f"**the machine was busy** ({load}): absolute times are inflated and noisy, so "
                "read the ratios, whose two sides ran interleaved in the same minutes")
    body = (f"{SECTION}\n\nMeasured {datetime.now(UTC):%Y-%m-%d} on {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; command `{COMMAND}` in `{IMAGE}`; gunicorn "
            f"with gunicorn.conf.py (1 worker of `app.serving.HeaderBufferingWorker`, gthread "
            f"with 256 threads) on SQLite (WAL); medians of "
            f"interleaved runs; {load}.\n\n{table}\n\n{READING}\n")
    write_section(DOCS, SECTION, body)


def write_section(docs: Path, section: str, body: str) -> None:
    """Replace `section` of the benchmarks document with `body` (or append it)."""
    text = docs.read_text() if docs.exists() else "# Benchmarks\n"
    if section in text:
        start = text.index(section)
        end = text.find("\n## ", start + len(section))
        rest = "\n" + text[end + 1:] if end != -1 else ""  # a blank line before the next
        text = text[:start] + body.rstrip("\n") + "\n" + rest
    else:
        text = text.rstrip("\n") + "\n\n" + body
    docs.write_text(text)


def stop_resolver(state_dir: Path) -> None:
    """The bench's own DNS resolver (its private state directory) goes with it."""
    try:
        os.kill(int((state_dir / "resolver.pid").read_text()), 15)
    except (OSError, ValueError):
        pass


def main() -> None:
    os.environ["SANDBOX_EGRESS_STATE_DIR"] = tempfile.mkdtemp(prefix="sandlot-bench-egress-")
    os.environ.setdefault("SANDBOX_DNS_UPSTREAM", "127.0.0.1:9")
    with sqlite_database() as url:
        token = seed(url)
        server, base = serve(url)
        try:
            results = measure(base, token)
        finally:
            server.terminate()
            server.wait(timeout=15)
    stop_resolver(Path(os.environ["SANDBOX_EGRESS_STATE_DIR"]))
    table = report(results)
    print(table)
    if not os.environ.get("BENCH_NO_DOCS"):
        write_docs(table)


if __name__ == "__main__":
    main()
