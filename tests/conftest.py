"""Shared fixtures: one app per run on SQLite or PostgreSQL (TEST_DATABASE_URL), a clean
database per test, the two_tenants world, and clients signed in every way we support."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text
from werkzeug.serving import make_server

from app import create_app
from app.extensions import db
from app.models import Role, Tenant, User
from app.security import tokens
from app.services import login_sessions
from tests import factories

CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)"')


def database_url(tmp_path_factory) -> str:
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{tmp_path_factory.mktemp('db') / 'sandlot-test.db'}"


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
def app_factory(db_url):
    """Build a testing app on the test database, with optional config overrides."""

    def build(**overrides):
        app = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": db_url, **overrides})
        app.test_client_class = IsolatedClient
        return app

    return build


@pytest.fixture(scope="session")
def app(app_factory):
    app = app_factory()
    with app.app_context():
        db.drop_all()
        db.create_all()
    return app


@pytest.fixture(autouse=True)
def _context(app) -> Iterator[None]:
    """Every test runs in an app context and leaves every table empty."""
    with app.app_context():
        yield
        db.session.remove()
        wipe(app)


def wipe(app) -> None:
    tables = list(reversed(db.metadata.sorted_tables))
    with db.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            names = ", ".join(t.name for t in tables)
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                conn.execute(table.delete())


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


@pytest.fixture(scope="session")
def live_server(app) -> Iterator[str]:
    """The app served over real HTTP on loopback, for Playwright and schemathesis."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


ROLES = list(Role)
