"""What issue 22's new per-exec checks cost a warm exec, in one run (not a test):

- a warm Docker exec that ends what the command left (the default since issue 22 item 7:
  a look at the container's process list after the command) against the same exec with
  `keep_processes` (no look: the exec as it was before), interleaved, in one container;
- the look itself (`reap.left_behind`), timed alone;
- the operator's backend check every exec now makes (`endpoints.require_backend`).

Quotas are checked only when a sandbox is created, never on a warm exec.

    .venv/bin/python bench/bench_exec_checks.py

Env: BENCH_CHECK_N (200) execs of each kind, BENCH_NO_DOCS=1 (print only). Needs the
local Docker engine, root and the image sandlot/sandbox:base (as the app does).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import create_app  # noqa: E402
from app.backends.base import SandboxSpec  # noqa: E402
from app.backends.docker import reap  # noqa: E402
from app.backends.docker.backend import DockerBackend  # noqa: E402
from app.services.sandboxes import endpoints  # noqa: E402

N = int(os.environ.get("BENCH_CHECK_N", "200"))
IMAGE = "sandlot/sandbox:base"
SECTION = "## Per-exec checks (issue 22): a warm exec with and without them"


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def p95_ms(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.95) - 1] * 1000


def main() -> None:
    backend = DockerBackend({"image": IMAGE, "host": "unix:///var/run/docker.sock",
                             "network_mode": "none"})
    info = backend.create(SandboxSpec(template=IMAGE, network_mode="none", metadata={
        "sandlot_tenant_id": "0", "sandlot_session_id": str(uuid.uuid4()),
        "sandlot_purpose": "bench"}))
    try:
        backend.exec(info.id, "true")  # warm the engine's look and the image's caches
        checked, kept = [], []
        for _ in range(N):  # interleaved, so load drifts hit both alike
            start = time.perf_counter()
            backend.exec(info.id, "true")
            checked.append(time.perf_counter() - start)
            start = time.perf_counter()
            backend.exec(info.id, "true", keep_processes=True)
            kept.append(time.perf_counter() - start)
        init_pid = int(backend.api.inspect_container(info.id)["State"]["Pid"])
        since = reap.now_ticks()
        look = []
        for _ in range(N * 5):
            start = time.perf_counter()
            reap.left_behind(init_pid, since)
            look.append(time.perf_counter() - start)
    finally:
        backend.delete(info.id)
        backend.close()
    app = create_app({"ENV": "testing"})
    doc = {"sandbox_type": "docker", "docker": {"image": IMAGE}}
    with app.app_context():
        gate = []
        for _ in range(N * 5):
            start = time.perf_counter()
            endpoints.require_backend(doc)
            gate.append(time.perf_counter() - start)
    report(checked, kept, look, gate)


def report(checked, kept, look, gate) -> None:
    added = median_ms(checked) - median_ms(kept)
    load = os.getloadavg()[0]
    lines = [
        SECTION, "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; `true` in `{IMAGE}` through `DockerBackend.exec` on "
        f"the local engine; {N} of each exec kind, interleaved; load average {load:.1f}.", "",
        "| What | n | Median (ms) | p95 (ms) | Median vs before |",
        "|---|---:|---:|---:|---:|",
        f"| warm exec, leftovers ended (now) | {len(checked)} | {median_ms(checked):.2f} | "
        f"{p95_ms(checked):.2f} | {median_ms(checked) / median_ms(kept):.3f}x |",
        f"| warm exec, `keep_processes` (before) | {len(kept)} | {median_ms(kept):.2f} | "
        f"{p95_ms(kept):.2f} | 1.000x |",
        f"| the leftover look alone | {len(look)} | {median_ms(look):.3f} | "
        f"{p95_ms(look):.3f} | |",
        f"| the backend check alone | {len(gate)} | {median_ms(gate):.4f} | "
        f"{p95_ms(gate):.4f} | |", "",
        f"The checks add **{added:.2f} ms** to a warm exec's median (goal: under 2 ms); the "
        "look reads the container's cgroup process list and each process's start time from "
        "/proc, and freezes nothing unless something was left. Quotas are counted only when "
        "a sandbox is created, so a warm exec never pays for them.", "",
    ]
    text = "\n".join(lines)
    print(text)
    if os.environ.get("BENCH_NO_DOCS"):
        return
    path = ROOT / "docs" / "benchmarks.md"
    doc = path.read_text()
    if SECTION in doc:
        head, _, rest = doc.partition(SECTION)
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
        doc = head + text + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    path.write_text(doc.rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
