"""Lists at scale (issue 15 item 7): the first page of a workspace with 1,000 sandbox
configs, through the JSON API and the Sandboxes page, against a bare SELECT of the same
page in the same run.

Not a test (nothing asserts a time). In-process: each request goes through the whole app
(WSGI test client: auth, tenancy, the query, masking, projection, JSON or the template),
without a network hop, so the ratio to the bare SELECT is the app's own overhead. The bare
SELECT is the ORM query of the same rows (the same filter, order and limit), loaded into
objects the way the app must load them, which includes opening each config's sealed
secrets (the column type decrypts them); a raw driver fetch of the same rows (no ORM, no
decryption) is shown too. Operations alternate round by round, so drift hits all alike.

    .venv/bin/python bench/bench_lists.py

Env: BENCH_POSTGRES_URL adds a PostgreSQL run (a database of your own: its tables are
created and dropped here); BENCH_N (200) rounds; BENCH_CONFIGS (1000);
BENCH_NO_DOCS=1 skips writing docs/benchmarks.md.
"""

from __future__ import annotations

import gzip
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import brotli  # noqa: E402
from flask import Flask  # noqa: E402
from sqlalchemy import event, select, text  # noqa: E402

from app import create_app  # noqa: E402
from app.extensions import db  # noqa: E402
from app.models import Role, SandboxConfig  # noqa: E402
from app.security import tokens  # noqa: E402
from app.services.identity import login_sessions, users  # noqa: E402

N = int(os.environ.get("BENCH_N", "200"))
CONFIGS = int(os.environ.get("BENCH_CONFIGS", "1000"))
API_PAGE, HTML_PAGE = 100, 50
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Lists at scale: first page of 1,000 configs vs a bare SELECT"
SECRET_KEY = "bench-secret-key-not-for-production-0123456789"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def document(i: int) -> dict:
    """A realistic Docker config: limits, a default-deny policy, two secret env values."""
    return {"sandbox_type": "docker", "default_timeout_sec": 120,
            "docker": {"image": "sandlot/sandbox:base", "memory_limit_mb": 2048,
                       "cpu_limit": 2, "idle_ttl_seconds": 1800},
            "env_vars": {"OPENAI_API_KEY": f"sk-bench-{i:04d}-{uuid.uuid4().hex}",
                         "GITHUB_TOKEN": f"ghp_bench{uuid.uuid4().hex}"},
            "network": {"deny_egress_by_default": True,
                        "allow_out": ["pypi.org", "files.pythonhosted.org", "*.github.com",
                                      "registry.npmjs.org", "api.openai.com"]}}


def seed(app: Flask) -> tuple[int, str, dict[str, str]]:
    tenant = users.create_tenant("Bench")
    user = users.create_user("admin@bench.test", "correct-horse-battery")
    users.grant(tenant, user, Role.admin)
    db.session.commit()
    for i in range(CONFIGS):
        db.session.add(SandboxConfig(
            id=str(uuid.uuid4()), tenant_id=tenant.id, name=f"agent-sandbox-{i:04d}",
            description=f"Sandbox {i} for the evaluation agents.", sandbox_type="docker",
            config=document(i), created_at=T0 + timedelta(seconds=i)))
    db.session.commit()
    claims = tokens.TokenClaims(user.id, tenant.id, user.session_version)
    token, _ = tokens.issue(claims, SECRET_KEY, 3600)
    sid = login_sessions.start(user)
    cookie = {login_sessions.SESSION_KEY: sid, "_user_id": user.get_id(), "_fresh": True,
              "tenant_id": tenant.id}
    return tenant.id, token, cookie


def bare(tenant_id: int, limit: int, by_name: bool) -> Callable[[], int]:
    order = (SandboxConfig.name, SandboxConfig.id) if by_name else \
        (SandboxConfig.created_at, SandboxConfig.id)
    query = (select(SandboxConfig).where(SandboxConfig.tenant_id == tenant_id,
                                         SandboxConfig.deleted_at.is_(None))
             .order_by(*order).limit(limit))

    def run() -> int:
        rows = db.session.scalars(query).all()
        db.session.remove()  # as every request ends: nothing stays in the identity map
        return len(rows)

    return run


def raw(tenant_id: int, limit: int) -> Callable[[], int]:
    sql = text("SELECT * FROM sandbox_configs WHERE tenant_id = :t AND deleted_at IS NULL "
               "ORDER BY created_at, id LIMIT :n")

    def run() -> int:
        with db.engine.connect() as conn:
            return len(conn.execute(sql, {"t": tenant_id, "n": limit}).all())

    return run


def measure(url: str) -> dict:
    app = create_app({"ENV": "testing", "SECRET_KEY": SECRET_KEY,
                      "SQLALCHEMY_DATABASE_URI": url, "REDIS_URL": None})
    with app.app_context():
        db.drop_all()
        db.create_all()
        try:
            return _measure(app, *seed(app))
        finally:
            db.session.remove()
            db.drop_all()


def _measure(app: Flask, tenant_id: int, token: str, cookie: dict) -> dict:
    api_client, html_client = app.test_client(), app.test_client()
    with html_client.session_transaction() as session:
        session.update(cookie)
    bearer = {"Authorization": f"Bearer {token}"}

    def get(client, path, headers=None):
        def run() -> bytes:
            response = client.get(path, headers=headers or {})
            assert response.status_code == 200, response.status_code
            return response.get_data()
        return run

    ops: dict[str, Callable] = {
        "bare SELECT, API page": bare(tenant_id, API_PAGE, by_name=False),
        "raw driver fetch, API page": raw(tenant_id, API_PAGE),
        "GET /api/v1/sandbox-configs": get(api_client, "/api/v1/sandbox-configs", bearer),
        "bare SELECT, HTML page": bare(tenant_id, HTML_PAGE, by_name=True),
        "GET /sandboxes": get(html_client, "/sandboxes"),
    }
    body = get(api_client, "/api/v1/sandbox-configs", bearer)()
    page = get(html_client, "/sandboxes")()
    assert body.count(b'"id"') == API_PAGE and b"sk-bench" not in body
    assert page.count(b'class="sandbox-name"') == HTML_PAGE and b"sk-bench" not in page
    sizes = {}
    for name, client, path, headers in (
            ("API", api_client, "/api/v1/sandbox-configs", bearer),
            ("HTML", html_client, "/sandboxes", {})):
        plain = get(client, path, headers)()
        sizes[name] = {"identity": len(plain), "gzip": len(gzip.compress(plain, 6)),
                       "br (as served)": len(get(client, path, {**headers,
                                                                "Accept-Encoding": "br"})())}
        assert brotli.decompress(get(client, path, {**headers, "Accept-Encoding": "br"})()) \
            == plain
    statements = {}
    for name, op in ops.items():
        seen: list[str] = []

        def count(conn, cursor, statement, *args, _seen=seen):
            _seen.append(statement.split()[0].upper())

        event.listen(db.engine, "before_cursor_execute", count)
        op()
        event.remove(db.engine, "before_cursor_execute", count)
        statements[name] = len(seen)
    times: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(10):
        for op in ops.values():
            op()
    names = list(ops)
    for i in range(N):
        for name in names if i % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            ops[name]()
            times[name].append((time.perf_counter() - start) * 1000)
    walk = walk_all(api_client, bearer)
    return {"times": times, "sizes": sizes, "statements": statements, "walk": walk}


def walk_all(client, headers) -> dict:
    """Every config, 500 a page: what a client that wants them all pays."""
    start, seen, cursor, pages, size = time.perf_counter(), 0, None, 0, 0
    while True:
        path = "/api/v1/sandbox-configs?limit=500" + (f"&cursor={cursor}" if cursor else "")
        response = client.get(path, headers=headers).get_json()
        seen, pages = seen + len(response["data"]), pages + 1
        size += len(client.get(path, headers=headers).get_data())
        cursor = response["next_cursor"]
        if cursor is None:
            break
    return {"rows": seen, "pages": pages, "ms": (time.perf_counter() - start) * 1000 / 2,
            "bytes": size}


def p95(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.95) - 1]


def report(results: dict[str, dict]) -> str:
    load = os.getloadavg()[0]
    lines = [SECTION, "",
             f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
             f"- Machine: nproc {os.cpu_count()}, Python {platform.python_version()}, "
             f"{platform.system()} {platform.machine()}; load average {load:.2f} at the end "
             "(the machine is shared by several sessions, so absolute times are inflated; "
             "the ratios within one run are the reading)",
             f"- Method: `bench/bench_lists.py`, in-process (WSGI test client, no network). "
             f"One workspace with {CONFIGS} Docker configs (limits, a default-deny policy "
             "with five destinations, two secret env values each). The API's first page is "
             f"{API_PAGE} configs (oldest first), the Sandboxes page's first page "
             f"{HTML_PAGE} cards (by name); each is compared with a bare SELECT of the same "
             "rows (ORM, same filter, order and limit, rows loaded and their secrets opened "
             "as the column type does). The raw driver fetch reads the same API page "
             f"without the ORM or decryption. {N} rounds after 10 warm-up rounds, the "
             "operations alternating in order.",
             "", "| Database | Operation | Median (ms) | p95 (ms) | Median vs its bare SELECT "
             "| SQL statements |", "|---|---|---:|---:|---:|---:|"]
    for db_name, res in results.items():
        t = {k: statistics.median(v) for k, v in res["times"].items()}
        base = {"bare SELECT, API page": "bare SELECT, API page",
                "raw driver fetch, API page": "bare SELECT, API page",
                "GET /api/v1/sandbox-configs": "bare SELECT, API page",
                "bare SELECT, HTML page": "bare SELECT, HTML page",
                "GET /sandboxes": "bare SELECT, HTML page"}
        for op in res["times"]:
            lines.append(f"| {db_name} | {op} | {t[op]:.2f} | {p95(res['times'][op]):.2f} | "
                         f"{t[op] / t[base[op]]:.2f}x | {res['statements'][op]} |")
    lines += ["", "| Database | Response | Bytes (identity) | gzip | br (as served) |",
              "|---|---|---:|---:|---:|"]
    for db_name, res in results.items():
        for name, size in res["sizes"].items():
            page = f"API first page ({API_PAGE})" if name == "API" else \
                f"Sandboxes page ({HTML_PAGE} cards)"
            lines.append(f"| {db_name} | {page} | {size['identity']:,} | {size['gzip']:,} | "
                         f"{size['br (as served)']:,} |")
    lines += [""]
    for db_name, res in results.items():
        w = res["walk"]
        lines.append(f"- {db_name}: all {w['rows']} configs through the API, 500 a page, took "
                     f"{w['pages']} requests, {w['ms']:.0f} ms and {w['bytes']:,} bytes "
                     "(identity) in all.")
    lines += ["", "Before this change (issue 15's measurement) the list had no pages: "
              "`GET /api/v1/sandbox-configs` returned all 1,000 configs (747 KB) in 39x a "
              "bare SELECT of the rows, and the Sandboxes page was 2 MB of HTML in 184 ms. "
              "Now a page is at most 500 rows (100 unless asked), the API masks by copying "
              "only the containers that hold secrets instead of deep-copying each document, "
              "and the page shows 50 cards with backend counts from one GROUP BY. What is "
              "left over the bare SELECT is the request itself (session or token check, "
              "tenancy, the COUNT for `total`), the pydantic projection of each row, JSON "
              "or the template, and compressing the answer when asked.", ""]
    return "\n".join(lines)


def write_docs(section: str) -> None:
    text_ = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if SECTION in text_:
        head, rest = text_.split(SECTION, 1)
        tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
        text_ = head + section + tail
    else:
        text_ = text_.rstrip("\n") + "\n\n" + section
    DOCS.write_text(text_)


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
