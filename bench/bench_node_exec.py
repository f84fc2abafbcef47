"""A warm session exec through the engine's node against the same on the local engine,
in one run (issue 28 item 2: a Docker engine owned by its host's node, `flask node`).

The deployment is built on this machine the way two hosts run it: the engine's host is
a `flask node` subprocess owning `local`, with directories of its own (egress state,
sandbox disks, temporary files); two web servers (gunicorn with gunicorn.conf.py, as
`make run`) share the database and Redis with it, one owning `local` (today's local
path: the web process uses the engine's socket) and one owning no engine (another host:
every backend call goes through Redis to the node). One session's sandbox serves both,
so both sides run the same command in the same container:

- warm exec via the API, once on each web server, interleaved round by round;
- backend.exec in this process on that container: DockerBackend (an app owning `local`)
  against RemoteBackend (an app owning none, through the same node), with the hooks a
  run passes, which isolates what the node's round trips cost;
- the same argv through the docker SDK (bench_exec's raw baseline).

Not a test. Scratch SQLite database (WAL) and the Redis of TEST_REDIS_URL (`source
/tmp/testenv.sh`); the node's Redis keys are the scratch database's own (deployment id),
so nothing here meets another run sharing that Redis.

    source /tmp/testenv.sh && .venv/bin/python bench/bench_node_exec.py

Env: BENCH_NODE_N (200) rounds, BENCH_NO_DOCS=1.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, closing
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import docker  # noqa: E402
import requests  # noqa: E402
from bench_auth import SECRET_KEY, SECRETS_KEY, free_port, sqlite_database  # noqa: E402
from bench_exec import client, new_session, raw_run, write_section  # noqa: E402

N = int(os.environ.get("BENCH_NODE_N", "200"))
WARMUP = 10
IMAGE = "sandlot/sandbox:base"
COMMAND = "python3 -c 'print(1)'"
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Docker engine through its node: warm exec vs the local engine"
LOAD_BEFORE = os.getloadavg()
GOAL = 1.10
API_LOCAL, API_NODE = "warm exec via the API, web owns the engine", \
    "warm exec via the API, through the node"
BACKEND_LOCAL, BACKEND_NODE = "backend.exec, DockerBackend (in process)", \
    "backend.exec, RemoteBackend through the node"
RAW = "raw docker exec (SDK)"


def bench_app(own: list[str], **overrides):
    """The app of every process here: production config, Docker on, the shared database,
    Redis and a private job queue; `own` the engines it owns."""
    from app import create_app

    return create_app({
        "ENV": "production", "SECRET_KEY": SECRET_KEY, "SECRETS_KEYS": [SECRETS_KEY],
        "SQLALCHEMY_DATABASE_URI": os.environ["BENCH_DATABASE_URL"],
        "REDIS_URL": os.environ["BENCH_REDIS_URL"], "JOB_QUEUE": os.environ["BENCH_JOB_QUEUE"],
        # each process's own directory; nothing here stores a bundle
        "SKILL_BUNDLE_DIR": os.environ.get("BENCH_BUNDLE_DIR") or tempfile.gettempdir(),
        "SKILL_BUNDLE_DIR_SHARED": True, "SANDBOX_BACKENDS": ["docker"],
        "SANDBOX_OWN_ENGINES": own, **overrides})


def served_app():
    """gunicorn's and `flask node`'s target (`bench_node_exec:served_app()`)."""
    return bench_app([name for name in os.environ.get("BENCH_OWN_ENGINES", "").split(",")
                      if name])


def own_dirs(root: Path, name: str) -> dict[str, str]:
    """A process's own directories, as a host of its own keeps them."""
    made = {kind: root / name / kind for kind in ("bundles", "egress", "disks", "tmp")}
    for path in made.values():
        path.mkdir(parents=True)
    return {"BENCH_BUNDLE_DIR": str(made["bundles"]),
            "SANDBOX_EGRESS_STATE_DIR": str(made["egress"]),
            "SANDBOX_DISK_DIR": str(made["disks"]), "TMPDIR": str(made["tmp"])}


def seed(app) -> tuple[str, str]:
    """A workspace with an admin and a Docker config: (bearer token, config id)."""
    from app.extensions import db
    from app.models import Role
    from app.security import tokens
    from app.services import audit
    from app.services.identity import users
    from app.services.sandboxes import configs as sandbox_configs

    with app.app_context():
        db.create_all()
        tenant = users.create_tenant("Bench")
        user = users.create_user("admin@bench.test", "correct-horse-battery")
        users.grant(tenant, user, Role.admin)
        db.session.commit()
        config = sandbox_configs.create_config(tenant, audit.SystemActor("bench"), "local", "", {
            "sandbox_type": "docker", "docker": {"image": IMAGE, "network_mode": "none"}})
        token, _ = tokens.issue(tokens.TokenClaims(user.id, tenant.id, user.session_version),
                                SECRET_KEY, 3600)
        return token, config.id


def serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    """The app under gunicorn with gunicorn.conf.py, with `env` added."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("gunicorn")), "--config",
               str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}",
               "--pythonpath", f"{ROOT},{ROOT / 'bench'}", "--log-level", "warning",
               "bench_node_exec:served_app()"]
    with log.open("ab") as output:
        server = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env},
                                  stdout=output, stderr=output)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.get(f"{base}/api/v1/openapi.json", timeout=2)
            return server, base
        except requests.RequestException:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"gunicorn did not start (see {log})")


def start_node(env: dict[str, str], log: Path, app) -> subprocess.Popen:
    """`flask node` owning `local`, live once its heartbeat is in Redis."""
    from app.services.sandboxes import nodes

    with log.open("ab") as output:
        node = subprocess.Popen(
            [str(Path(sys.executable).with_name("flask")), "--app",
             "bench_node_exec:served_app()", "node"], cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'bench'}", **env},
            stdout=output, stderr=output)
    deadline = time.monotonic() + 30
    with app.app_context():
        while not nodes.live_nodes("local"):
            if node.poll() is not None or time.monotonic() > deadline:
                node.kill()
                raise RuntimeError(f"the node did not come up (see {log})")
            time.sleep(0.2)
    return node


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def timed_once(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def measure(token: str, config_id: str, local_base: str, node_base: str,
            local_app, none_app) -> dict[str, list[float]]:
    from app.backends.sandbox_paths import OUTPUT_DIR
    from app.extensions import db
    from app.models import SandboxConfig
    from app.services.sandboxes.provider import backend_for
    from app.services.sessions.lifecycle import OUTPUT_LIMIT

    local_http, node_http = client(token), client(token)
    session_id, container = new_session(local_http, local_base, config_id)
    with local_app.app_context():
        doc = db.session.get(SandboxConfig, config_id).config
    engine = docker.APIClient(version="auto", timeout=60)

    def api(http, base):
        def run():
            data = http.post(f"{base}/api/v1/sessions/{session_id}/exec",
                             json={"command": COMMAND}).json()["data"]
            assert data["reused"] and data["stdout"] == "1\n", data
        return run

    def backend(app, kind: str):
        def run():  # as a run calls it: a backend per request, the live hooks
            with app.app_context():
                made = backend_for(doc)
                assert type(made).__name__ == kind, type(made)
                result = made.exec(container, COMMAND, cwd=None, env={}, timeout_sec=60,
                                   output_limit=OUTPUT_LIMIT, new_files_in=OUTPUT_DIR,
                                   on_output=lambda stream, chunk: None,
                                   on_started=lambda ref: None)
                made.close()
            assert result.exit_code == 0 and result.stdout == "1\n", result
        return run

    variants = {API_LOCAL: api(local_http, local_base), API_NODE: api(node_http, node_base),
                BACKEND_LOCAL: backend(local_app, "DockerBackend"),
                BACKEND_NODE: backend(none_app, "RemoteBackend"),
                RAW: lambda: raw_run(engine, container)}
    names = list(variants)
    for name in names:
        for _ in range(WARMUP):
            variants[name]()
    results: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(N):  # interleaved, each round starting one further along
        for offset in range(len(names)):
            name = names[(round_ + offset) % len(names)]
            results[name].append(timed_once(variants[name]))
    local_http.delete(f"{local_base}/api/v1/sessions/{session_id}")
    engine.close()
    return results


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[94]


def report(results: dict[str, list[float]]) -> str:
    med = {name: statistics.median(samples) for name, samples in results.items()}
    raw = med[RAW]
    lines = ["| What | n | Median (ms) | p95 (ms) | Median vs raw exec |",
             "|---|---:|---:|---:|---:|"]
    for name, samples in results.items():
        lines.append(f"| {name} | {len(samples)} | {med[name]:.1f} | {p95(samples):.1f} | "
                     f"{med[name] / raw:.2f}x |")
    api = med[API_NODE] / med[API_LOCAL]
    api95 = p95(results[API_NODE]) / p95(results[API_LOCAL])
    rpc = med[BACKEND_NODE] - med[BACKEND_LOCAL]
    lines += ["", "| Target (issue 28 item 2) | Goal | This run |", "|---|---:|---:|",
              f"| warm exec through the node vs the local engine, medians | at most "
              f"{GOAL:.2f}x | {api:.2f}x ({med[API_NODE] - med[API_LOCAL]:+.1f} ms) |",
              f"| the same, p95 | - | {api95:.2f}x |",
              f"| backend.exec through the node vs DockerBackend, medians | - | "
              f"{med[BACKEND_NODE] / med[BACKEND_LOCAL]:.2f}x ({rpc:+.1f} ms) |"]
    return "\n".join(lines)


def write_docs(table: str, load_after: tuple[float, float, float], reading: str) -> None:
    load = (f"load average (1, 5, 15 min) {', '.join(f'{x:.2f}' for x in LOAD_BEFORE)} "
            f"before the run, {', '.join(f'{x:.2f}' for x in load_after)} after, on "
            f"{os.cpu_count()} cores")
    body = (f"{SECTION}\n\nMeasured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on "
            f"{os.cpu_count()} cores ({platform.machine()}), Python "
            f"{platform.python_version()}; command `{COMMAND}` in `{IMAGE}` (network "
            f"none); {load}.\n\nMethod: `bench/bench_node_exec.py`. Four processes on "
            "this machine, each with its own egress state, disk and temporary "
            "directories: `flask node` owning `local` (the engine's host), a gunicorn web "
            "server owning `local` (today's local path), a gunicorn web server owning no "
            "engine (another host: its backend calls go through Redis to the node), and "
            "the bench, which holds one app of each kind for the backend rows. Both web "
            "servers run gunicorn.conf.py (1 worker of `app.serving.HeaderBufferingWorker`, "
            "gthread) and share one SQLite database (WAL) and the Redis server; one "
            "session's sandbox serves every row, so each runs the same command in the same "
            f"container. {N} rounds after {WARMUP} warm-up calls of each; in each round "
            "every row runs once, the order turning by one each round, so drift hits all "
            f"alike.\n\n{table}\n\n{reading}\n")
    write_section(DOCS, SECTION, body)


def cleanup(config_id: str, queue: str, redis_url: str, roots: list[Path]) -> None:
    """The session's container (no worker runs here to remove it), the private job
    queue, and any loop disk left mounted in the processes' directories."""
    import redis

    from app.backends.docker import disk

    with closing(docker.DockerClient(version="auto", timeout=60)) as engine:
        for box in engine.containers.list(all=True, filters={
                "label": [f"sandlot_sandbox_config_id={config_id}"]}):
            box.remove(force=True)
    connection = redis.Redis.from_url(redis_url)
    for key in connection.scan_iter(f"rq:*{queue}*"):
        connection.delete(key)
    for directory in roots:
        for image in directory.glob("*/disks/*.img"):
            disk.release(image.stem, str(image.parent))


def main() -> None:
    redis_url = os.environ.get("TEST_REDIS_URL") or os.environ.get("BENCH_REDIS_URL")
    if not redis_url:
        sys.exit("Set TEST_REDIS_URL (source /tmp/testenv.sh): the node needs Redis.")
    os.environ["BENCH_REDIS_URL"] = redis_url
    os.environ["BENCH_JOB_QUEUE"] = f"sandlot-bench-node-{uuid.uuid4().hex[:8]}"
    os.environ.setdefault("SANDBOX_DNS_UPSTREAM", "127.0.0.1:9")
    root = Path(tempfile.mkdtemp(prefix="sandlot-bench-node-"))
    bench_dirs = own_dirs(root, "bench")
    os.environ.update({k: v for k, v in bench_dirs.items() if k != "TMPDIR"})
    config_id = ""
    with sqlite_database() as url, ExitStack() as stack:
        os.environ["BENCH_DATABASE_URL"] = url
        local_app, none_app = bench_app(["local"]), bench_app([])
        token, config_id = seed(local_app)
        stack.callback(lambda: cleanup(config_id, os.environ["BENCH_JOB_QUEUE"],
                                       redis_url, [root]))
        node = start_node({**own_dirs(root, "node"), "BENCH_OWN_ENGINES": "local"},
                          root / "node.log", local_app)
        stack.callback(stop, node)
        local_server, local_base = serve({**own_dirs(root, "web-local"),
                                          "BENCH_OWN_ENGINES": "local"}, root / "web-local.log")
        stack.callback(stop, local_server)
        node_server, node_base = serve({**own_dirs(root, "web-none"), "BENCH_OWN_ENGINES": ""},
                                       root / "web-none.log")
        stack.callback(stop, node_server)
        results = measure(token, config_id, local_base, node_base, local_app, none_app)
    load_after = os.getloadavg()
    table = report(results)
    print(table)
    print(f"load average before {LOAD_BEFORE}, after {load_after}; logs in {root}")
    if not os.environ.get("BENCH_NO_DOCS"):
        write_docs(table, load_after, reading(results))


def reading(results: dict[str, list[float]]) -> str:
    med = {name: statistics.median(samples) for name, samples in results.items()}
    api = med[API_NODE] - med[API_LOCAL]
    rpc = med[BACKEND_NODE] - med[BACKEND_LOCAL]
    verdict = (f"within the goal of {GOAL:.2f}x" if med[API_NODE] <= GOAL * med[API_LOCAL]
               else f"past the goal of {GOAL:.2f}x by "
                    f"{(med[API_NODE] / med[API_LOCAL] - GOAL) * 100:.1f} points")
    return (
        f"Reading: through the node a warm exec took {api:+.1f} ms at the median "
        f"({med[API_NODE] / med[API_LOCAL]:.2f}x, {verdict}). A warm exec through the node "
        "is two calls over Redis: the session's look at its sandbox (`get_recent`, "
        "answered from the node's own recent look) and the exec; the engine's id, which "
        "every command checks, comes with the nodes' heartbeat once a node has answered "
        "it. Each call is a push on the engine's list, the node's pick-up and hand-off to "
        "a thread of its own, a `taken` event, then the answer (an exec also sends its "
        "`started` event and its output as it comes). The backend rows isolate one exec "
        f"call: {rpc:+.1f} ms over DockerBackend in this process, the same command in "
        "the same container. What a call costs is mostly waking processes (caller, "
        "Redis, the node and its thread) rather than Redis work: on a loaded machine "
        "each wake-up waits for a core. The web process that owns no engine does not read "
        "the exec's stream itself, so part of the local path's CPU work moves to the "
        "node, which is why the API difference can come out smaller than the backend "
        "row's.").replace("\n", " ")

if __name__ == "__main__":
    main()
