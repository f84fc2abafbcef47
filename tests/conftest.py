"""Shared fixtures: one app per run on SQLite or PostgreSQL (TEST_DATABASE_URL), a clean
database per test, the two_tenants world, and clients signed in every way we support."""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from flask import Flask, current_app
from flask.testing import FlaskClient
from hypothesis import settings
from sqlalchemy import create_engine, make_url, select, text
from sqlalchemy.exc import OperationalError
from werkzeug.serving import make_server

from app import create_app
from app.extensions import db
from app.models import Job, Role, SandboxSession, Tenant, User
from app.security import tokens
from app.services import capacity
from app.services.identity import login_sessions
from app.services.sandboxes import pools
from app.services.sessions import lifecycle as sessions
from app.services.sessions import runs
from tests import factories

pytest.register_assert_rewrite("tests.snapshot_guard")  # a plugin (below), imported here first
from tests import snapshot_guard  # noqa: E402

# Hypothesis checks properties, not speed: its per-example deadline (200 ms) fails tests on
# a busy 2-core machine at random, which is exactly what the suite must not do.
settings.register_profile("sandlot", deadline=None)
settings.load_profile("sandlot")

# `engine`: a client of the local Docker engine, for tests that look at sandboxes from
# outside the app (a folder's conftest may define its own).
# `tests.snapshot_guard`: the run fails if a snapshot image of its configs outlives it.
# `tests.exec_paths`: modules with EXEC_PATHS = True run through the exec agent and not.
pytest_plugins = ["tests.docker_engine", "tests.snapshot_guard", "tests.exec_paths"]

# No lookup leaves this machine (the sandboxes' resolver and "explain this destination"
# forward names to this upstream): a closed local port unless a test names its own.
os.environ.setdefault("SANDBOX_DNS_UPSTREAM", "127.0.0.1:9")
# Each pytest-xdist worker has egress state of its own (sandbox state files, resolver,
# gateway, egress log files): what one worker's sandboxes wrote is never ingested into
# another worker's database. Its daemons stop when the worker's session ends.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("SANDBOX_EGRESS_STATE_DIR"):
    os.environ["SANDBOX_EGRESS_STATE_DIR"] += "-" + os.environ["PYTEST_XDIST_WORKER"]


def pytest_sessionfinish(session, exitstatus):
    import signal
    from pathlib import Path

    from app.backends.docker.egress import dns, gateway

    state_dir = Path(os.environ.get("SANDBOX_EGRESS_STATE_DIR") or "")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not state_dir.is_dir():
        return
    for pid_file in (dns.pid_path(state_dir), gateway.pid_path(state_dir)):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass

CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')
# How long cleanup waits for a test's jobs and requests before it names them and fails.
SETTLE_SECONDS = float(os.environ.get("SANDLOT_TEST_SETTLE_SECONDS", "120"))


def database_url(tmp_path_factory) -> str:
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return worker_database(url)
    return f"sqlite:///{tmp_path_factory.mktemp('db') / 'sandlot-test.db'}"


def worker_database(url: str) -> str:
    """Under pytest-xdist each worker gets a PostgreSQL database of its own
    (`<name>_gw0`, ...), created on first use, so workers never wipe each other's rows."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    base = make_url(url)
    name = f"{base.database}_{worker}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if not conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}):
                conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def db_url(tmp_path_factory) -> str:
    return database_url(tmp_path_factory)


class IsolatedClient(FlaskClient):
    """Each request in a fresh app context, as a real server does.

    The autouse `_context` fixture keeps an app context open for the whole test; without
    this, requests would reuse it and `g` (Flask-Login's cached user, our principal, the
    CSRF token) would leak from one client's request into another's.
    """

    def open(self, *args, **kwargs):
        with self.application.app_context():
            response = super().open(*args, **kwargs)
            response.get_data()  # buffer the body before the context goes
            return response


@pytest.fixture(scope="session")
def built_apps() -> list[Flask]:
    """Every app built in this run; their background work is settled after each test."""
    return []


@pytest.fixture(scope="session")
def app_factory(db_url, built_apps):
    """Build a testing app on the test database, with optional config overrides."""

    def build(**overrides):
        app = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": db_url, **overrides})
        app.test_client_class = IsolatedClient
        built_apps.append(app)
        return app

    return build


@pytest.fixture(scope="session")
def app(app_factory):
    app = app_factory()
    with app.app_context():
        db.drop_all()
        db.create_all()
    return app


@pytest.fixture(scope="session")
def cleanup_state() -> dict:
    """Whether the database may hold a previous test's rows (its cleanup did not finish),
    and the stragglers already reported (named once, by the test that left them)."""
    return {"dirty": False, "reported": set()}


@pytest.fixture(autouse=True)
def _context(app, built_apps, cleanup_state) -> Iterator[None]:
    """Every test runs in an app context on an empty database, and leaves nothing running.

    Cleanup settles the test's background work first (requests still in flight on the live
    server, jobs on every app's in-process pool), then empties every table. Work still
    running after SETTLE_SECONDS fails that test by name, once; later tests do not wait
    for it again. If a cleanup fails, the next test repeats it before its own setup, so
    one failure never turns into a cascade of unrelated errors.
    """
    with app.app_context():
        if cleanup_state["dirty"]:
            settle_and_wipe(app, built_apps, cleanup_state)
        yield
        db.session.remove()
        settle_and_wipe(app, built_apps, cleanup_state)


def settle_and_wipe(app, built_apps, cleanup_state) -> None:
    cleanup_state["dirty"] = True
    db.session.remove()
    stragglers = settle(built_apps, ignore=cleanup_state["reported"])
    cleanup_state["reported"].update(stragglers)
    try:
        end_sessions()
        snapshot_guard.release_test_snapshots()
    finally:
        wipe(app)
        forget_capacity(built_apps)
    cleanup_state["dirty"] = False
    if stragglers:
        pytest.fail("work still running after the test ended: "
                    f"{', '.join(stragglers.values())}; a test must wait for what it starts",
                    pytrace=False)


def forget_capacity(built_apps) -> None:
    """No lease of a test's terminals, streams or runs counts in the next (ids restart)."""
    stores = {(a.config.get("REDIS_URL") or "", a.config.get("SQLALCHEMY_DATABASE_URI")): a
              for a in built_apps}
    for built in stores.values():  # one app per counter store (Redis or memory, deployment)
        with built.app_context():
            try:
                capacity.forget_all()
            except Exception:  # noqa: BLE001 - a test's deliberately unreachable Redis
                pass


def end_sessions() -> None:
    """End every session a test left, through the service, so no sandbox outlives its rows.

    Best effort by design: a session whose provider is gone (a fake already stopped) or
    whose secrets no longer decrypt (a key-rotation test) has nothing we can reach, and
    its failure must not keep the database from being emptied."""
    config = current_app.config
    saved = config.get("SANDBOX_ALLOW_PRIVATE_ENDPOINTS")
    config["SANDBOX_ALLOW_PRIVATE_ENDPOINTS"] = True  # the loopback fakes tests point configs at
    try:
        for session_id in db.session.scalars(select(SandboxSession.id)).all():
            try:
                session = db.session.get(SandboxSession, session_id)
                tenant = db.session.get(Tenant, session.tenant_id)
                sessions.delete_session(tenant, db.session.get(User, session.user_id), session)
            except Exception:  # noqa: BLE001 - see the docstring
                db.session.rollback()
        try:  # warm pool sandboxes, and those of sessions that claimed but never bound one
            pools.drain()
        except Exception:  # noqa: BLE001 - see the docstring
            db.session.rollback()
    finally:
        config["SANDBOX_ALLOW_PRIVATE_ENDPOINTS"] = saved
        db.session.remove()


def settle(built_apps, seconds: float = SETTLE_SECONDS,
           ignore: frozenset | set = frozenset()) -> dict[str, str]:
    """Wait for the live server's in-flight requests and every in-process job (except those
    in `ignore`); return what is still running after `seconds`, by key -> description."""
    leftovers: dict[str, str] = {}
    live = _LIVE["server"]
    if live is not None:
        leftovers.update(live.wait_idle(seconds, ignore))
    for built in built_apps:
        dispatcher = built.extensions["sandlot_dispatcher"]
        if hasattr(dispatcher, "drain"):
            for job_id in dispatcher.drain(seconds):
                if job_id not in ignore:
                    leftovers[job_id] = describe_job(built, job_id)
        for run_id in runs.drain(built, seconds):  # commands sent by exec, off the request
            if run_id not in ignore:
                leftovers[run_id] = f"exec run {run_id}"
    return leftovers


def describe_job(app, job_id: str) -> str:
    with app.app_context():
        job = db.session.get(Job, job_id)
        name = f"job {job.kind} {job_id} ({job.status.value})" if job else f"job {job_id}"
        db.session.remove()
    return name


def wipe(app, lock_timeout: str = "10s") -> None:
    """Empty every table. On PostgreSQL a lock held by a straggler fails fast, naming it,
    instead of waiting (or deadlocking) on it."""
    tables = list(reversed(db.metadata.sorted_tables))
    with db.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
            names = ", ".join(t.name for t in tables)
            try:
                conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
            except OperationalError as exc:
                raise RuntimeError(f"cleanup could not lock the tables: {lock_holders(app)}") \
                    from exc
        else:
            for table in tables:
                conn.execute(table.delete())


def lock_holders(app) -> str:
    """The other sessions of this database and what they run (for a cleanup failure)."""
    with db.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT pid, state, left(query, 120) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )).all()
    return "; ".join(f"pid {pid} {state}: {query}" for pid, state, query in rows) or "none"


@pytest.fixture
def private_endpoints(app, monkeypatch) -> None:
    """The operator allows private endpoints (decisions 11), for configs that point at the
    loopback fakes of E2B, Cube and the registries."""
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def two_tenants():
    """Tenants A and B, each with an owner, admin, contributor and viewer."""
    return factories.populate("Tenant A"), factories.populate("Tenant B")


@pytest.fixture
def login_as(app):
    """A browser-like test client signed in as `user` in `tenant` (session cookie)."""

    def sign_in(user: User, tenant: Tenant | None = None):
        client = app.test_client()
        tenant_id = tenant.id if tenant else min(m.tenant_id for m in user.memberships)
        sid = login_sessions.start(user)  # a real server-side sign-in, as the login form makes
        with client.session_transaction() as session:
            session[login_sessions.SESSION_KEY] = sid
            session["_user_id"] = user.get_id()
            session["_fresh"] = True
            session["tenant_id"] = tenant_id
        return client

    return sign_in


def csrf_token(client, path: str = "/") -> str:
    """The CSRF token a signed-in page carries in its <meta>."""
    page = client.get(path).get_data(as_text=True)
    match = CSRF_META.search(page)
    assert match, f"no csrf-token meta on {path}"
    return match.group(1)


@dataclass
class ApiClient:
    """A test client that sends one kind of API credential with every request."""

    client: object
    headers: dict[str, str]

    def open(self, method: str, path: str, **kwargs):
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return self.client.open(path, method=method, headers=headers, **kwargs)

    def get(self, path, **kw):
        return self.open("GET", path, **kw)

    def post(self, path, **kw):
        return self.open("POST", path, **kw)

    def put(self, path, **kw):
        return self.open("PUT", path, **kw)

    def patch(self, path, **kw):
        return self.open("PATCH", path, **kw)

    def delete(self, path, **kw):
        return self.open("DELETE", path, **kw)


@pytest.fixture
def bearer(app):
    """An API client with a bearer token for `user` in `tenant`."""

    def make(user: User, tenant: Tenant) -> ApiClient:
        claims = tokens.TokenClaims(user.id, tenant.id, user.session_version)
        token, _ = tokens.issue(claims, app.config["SECRET_KEY"], 600)
        return ApiClient(app.test_client(), {"Authorization": f"Bearer {token}"})

    return make


@pytest.fixture
def key_client(app):
    """An API client with a new API key of `tenant` (full access unless capabilities given)."""

    def make(tenant: Tenant, *capabilities: str, full_access: bool | None = None) -> ApiClient:
        full = (not capabilities) if full_access is None else full_access
        _, plaintext = factories.make_key(tenant, full_access=full, capabilities=capabilities)
        return ApiClient(app.test_client(), {"X-API-Key": plaintext})

    return make


class LiveServer:
    """The app over real HTTP on loopback, keeping the requests still being served, so a
    test's cleanup can wait for the last one (a poll fired as the tab closed) to end."""

    def __init__(self, app):
        self.app = app
        self.in_flight: dict[str, str] = {}
        self._idle = threading.Condition()
        self.server = make_server("127.0.0.1", 0, self, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def __call__(self, environ, start_response):
        key = f"request-{uuid.uuid4().hex[:8]}"
        with self._idle:
            self.in_flight[key] = (f"live-server request {environ['REQUEST_METHOD']} "
                                   f"{environ.get('PATH_INFO', '')}")
        try:
            body = self.app(environ, start_response)
        except BaseException:
            self._done(key)
            raise
        return self._served(body, key)

    def _served(self, body, key: str):
        """The body, marking the request done once it is sent (or abandoned): werkzeug's
        own close() comes later, after it drains the socket, which a browser that reuses
        the connection for the next request can hold open for as long as it lives."""
        try:
            yield from body
        finally:
            try:
                if hasattr(body, "close"):
                    body.close()
            finally:
                self._done(key)

    def _done(self, key: str) -> None:
        with self._idle:
            self.in_flight.pop(key, None)
            self._idle.notify_all()

    def wait_idle(self, timeout: float, ignore=frozenset()) -> dict[str, str]:
        """The requests (other than `ignore`) still running after waiting up to `timeout`."""
        with self._idle:
            self._idle.wait_for(lambda: not set(self.in_flight) - set(ignore), timeout)
            return {k: v for k, v in self.in_flight.items() if k not in ignore}


_LIVE: dict[str, LiveServer | None] = {"server": None}


@pytest.fixture(scope="session")
def live_server(app) -> Iterator[str]:
    """The app served over real HTTP on loopback, for Playwright and schemathesis."""
    live = LiveServer(app)
    thread = threading.Thread(target=live.server.serve_forever, daemon=True)
    thread.start()
    _LIVE["server"] = live
    yield live.url
    _LIVE["server"] = None
    live.server.shutdown()


ROLES = list(Role)
