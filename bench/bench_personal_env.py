"""Personal-variable resolution (reference 8.4): one resolution with 50 variables in each
layer (workspace values of 50 declarations, 50 config-wide and 50 skill values of the
caller) against a single keyed lookup of one of the caller's values, in the same run.

Not a test (nothing asserts a time). In-process against the service, on a scratch SQLite
file and, with BENCH_POSTGRES_URL (a database of your own; its tables are created and
dropped here), on PostgreSQL. The two operations alternate round by round, so drift hits
both alike. SQL statements are counted with a `before_cursor_execute` listener.

    .venv/bin/python bench/bench_personal_env.py

Env: BENCH_N (500) rounds; BENCH_NO_DOCS=1 skips writing docs/benchmarks.md.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import event, select  # noqa: E402

from app import create_app  # noqa: E402
from app.extensions import db  # noqa: E402
from app.models import InstalledSkill, InstallStatus, PersonalEnvVar, SandboxConfig  # noqa: E402
from app.security.crypto import crypto  # noqa: E402
from app.services.identity import users  # noqa: E402
from app.services.personal import resolver  # noqa: E402
from app.services.personal import values as personal_env  # noqa: E402

N = int(os.environ.get("BENCH_N", "500"))
LAYER = 50
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Personal variables: resolution vs one keyed lookup"


def seed() -> tuple[personal_env.Who, str, str]:
    tenant = users.create_tenant("bench")
    user = users.create_user("bench@example.test", "bench-Password-123")
    users.grant(tenant, user, "contributor")
    config = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant.id, name="bench",
                           sandbox_type="docker", config={"sandbox_type": "docker"})
    db.session.add(config)
    names = [f"VAR_{i:02d}" for i in range(LAYER)]
    skill = InstalledSkill(id=str(uuid.uuid4()), tenant_id=tenant.id, sandbox_config_id=config.id,
                           name="bench-skill", status=InstallStatus.ready, enabled=True,
                           envs=[{"name": n, "description": "", "required": True} for n in names],
                           env_values={n: f"workspace-{n}" for n in names})
    db.session.add(skill)
    db.session.commit()
    who = personal_env.Who.user(tenant, user)
    for n in names:
        personal_env.set_config_value(who, config.id, n, f"wide-{n}")
        personal_env.set_skill_value(who, skill.id, n, f"mine-{n}")
    return who, config.id, skill.id


def keyed(who: personal_env.Who, config_id: str, skill_id: str) -> str:
    """The floor: one row by its full unique key, decrypted."""
    return db.session.scalar(who.rows().where(
        PersonalEnvVar.sandbox_config_id == config_id, PersonalEnvVar.skill_id == skill_id,
        PersonalEnvVar.name == "VAR_07")).value


def measure(url: str) -> dict:
    app = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        db.drop_all()
        db.create_all()
        try:
            who, config_id, skill_id = seed()
            skill = db.session.get(InstalledSkill, skill_id)
            _ = skill.env_values  # the exec path has the skill row loaded already
            ops = {"resolve": lambda: resolver.resolve(who, config_id, skill),
                   "keyed": lambda: keyed(who, config_id, skill_id)}
            result = resolver.resolve(who, config_id, skill)
            assert len(result.env) == LAYER and not result.missing
            assert all(v.startswith("mine-") for v in result.env.values())
            counts = {}
            for name, op in ops.items():
                seen: list[str] = []

                def count(conn, cursor, statement, *args, _seen=seen):
                    _seen.append(statement)

                event.listen(db.engine, "before_cursor_execute", count)
                op()
                event.remove(db.engine, "before_cursor_execute", count)
                counts[name] = len(seen)
            times: dict[str, list[float]] = {name: [] for name in ops}
            for _ in range(20):
                for op in ops.values():
                    op()
            for i in range(N):
                order = list(ops.items()) if i % 2 == 0 else list(ops.items())[::-1]
                for name, op in order:
                    start = time.perf_counter()
                    op()
                    times[name].append((time.perf_counter() - start) * 1000)
                db.session.rollback()
            rows = db.session.scalar(select(db.func.count()).select_from(PersonalEnvVar))
            token = crypto().encrypt("x" * 40)
            start = time.perf_counter()
            for _ in range(2000):
                crypto().decrypt(token)
            decrypt_us = (time.perf_counter() - start) / 2000 * 1e6
            return {"counts": counts, "times": times, "rows": rows, "decrypt_us": decrypt_us}
        finally:
            db.session.remove()
            db.drop_all()


def p95(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.95) - 1]


def report(results: dict[str, dict]) -> str:
    load = os.getloadavg()[0]
    lines = [SECTION, "",
             f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
             f"- Machine: nproc {os.cpu_count()}, Python {platform.python_version()}, "
             f"{platform.system()} {platform.machine()}; load average {load:.2f} at the end "
             "(the machine is shared)",
             f"- Method: `bench/bench_personal_env.py`, in-process against the service. One "
             f"caller with {LAYER} config-wide and {LAYER} skill values, a skill declaring "
             f"{LAYER} required names that all have workspace values ({3 * LAYER} values in "
             "play; the table holds the caller's 100 rows). `resolve` is "
             "`env_resolver.resolve` for that skill (the skill row already loaded, as on the "
             "exec path); `keyed` reads one of the caller's values by its full unique key and "
             f"decrypts it. {N} rounds after 20 warm-up rounds, the two alternating in order.",
             "", "| Database | Operation | Median (ms) | p95 (ms) | Median vs keyed | "
             "SQL statements |", "|---|---|---:|---:|---:|---:|"]
    for db_name, res in results.items():
        base = statistics.median(res["times"]["keyed"])
        for op in ("keyed", "resolve"):
            median = statistics.median(res["times"][op])
            lines.append(f"| {db_name} | {op} | {median:.3f} | {p95(res['times'][op]):.3f} | "
                         f"{median / base:.2f}x | {res['counts'][op]} |")
    decrypt = statistics.median(r["decrypt_us"] for r in results.values())
    lines += ["", "Resolution is one SELECT of the caller's rows for the config (config-wide "
              "and that skill's, filtered in SQL by the unique key's leading columns), whatever "
              "the number of variables (last column), so its extra cost is not round trips. "
              "It is Python work: the 100 rows come back as 100 Fernet tokens, each decrypted "
              f"on its own (one token took a median of {decrypt:.0f} µs here, so about "
              f"{decrypt * 100 / 1000:.1f} ms for 100), plus building 100 result rows and "
              "three dictionary passes. Decryption is per row on purpose: a value that no "
              "longer decrypts must refuse the run naming that variable, not fail the whole "
              "read. A few milliseconds per skill exec is small next to the exec itself "
              "(see the Session exec section).", ""]
    return "\n".join(lines)


def write_docs(section: str) -> None:
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if SECTION in text:
        head, rest = text.split(SECTION, 1)
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOCS.write_text(text)


def main() -> None:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["SQLite (file)"] = measure(f"sqlite:///{tmp}/bench.db")
    if os.environ.get("BENCH_POSTGRES_URL"):
        results["PostgreSQL"] = measure(os.environ["BENCH_POSTGRES_URL"])
    section = report(results)
    print(section)
    if not os.environ.get("BENCH_NO_DOCS"):
        write_docs(section)


if __name__ == "__main__":
    main()
