"""Secret canaries: plant unique secrets everywhere secrets live (passwords, API keys, every
encrypted column, a throwaway encrypted table that goes through key rotation, invitation
tokens), call every
route of url_map every way it can be called, and find none of them in any response body,
header, session cookie, CLI output or log record.

The only plaintext API key a response may carry is one that request itself created.
"""

from __future__ import annotations

import html
import logging
import re
import secrets
from dataclasses import dataclass, field
from http.cookies import SimpleCookie

import requests
from sqlalchemy import select

from app.extensions import db
from app.models import ApiKey, Role
from app.security import tokens
from app.services import key_rotation as secret_service
from tests import factories
from tests.sweeps import forms, routes
from tests.sweeps import secrets as planted

KEY_PLAINTEXT = re.compile(r"sl_([0-9a-f]{8})_[A-Za-z0-9_-]{20,}")


def canary(label: str) -> str:
    return f"{label}Cnry{secrets.token_hex(8)}"


@dataclass
class World:
    tenant: object
    users: dict[Role, object]
    passwords: dict[str, str]
    key: str
    rows: routes.Rows
    request_secret: str = field(default_factory=lambda: canary("request"))


@dataclass
class Hunter:
    """Collects every place a canary (or a stored API key) turned up."""

    app: object
    canaries: dict[str, str]
    leaks: list[str] = field(default_factory=list)

    def plant(self, label: str, value: str) -> str:
        self.canaries[label] = value
        if KEY_PLAINTEXT.fullmatch(value):
            self.canaries[f"{label} (secret part)"] = value.split("_", 2)[2]
        return value

    def scan(self, where: str, text: str, new_keys: frozenset[str] = frozenset()) -> None:
        for label, value in self.canaries.items():
            if value in text or html.escape(value) in text:
                self.leaks.append(f"{where}: carries {label}")
        for match in KEY_PLAINTEXT.finditer(text):
            if match.group(1) not in new_keys:
                self.leaks.append(f"{where}: carries an API key in plaintext ({match.group(1)})")

    def response(self, where: str, response, new_keys: frozenset[str] = frozenset()) -> None:
        self.scan(f"{where} body", response.get_data(as_text=True), new_keys)
        for name, value in response.headers.items():
            self.scan(f"{where} header {name}", value)
        for cookie in response.headers.getlist("Set-Cookie"):
            self.session_cookie(where, cookie)

    def session_cookie(self, where: str, header: str) -> None:
        """The Flask session is signed, not encrypted: look inside it too."""
        name = self.app.config["SESSION_COOKIE_NAME"]
        jar = SimpleCookie()
        jar.load(header)
        if name in jar and jar[name].value:
            serializer = self.app.session_interface.get_signing_serializer(self.app)
            self.scan(f"{where} session cookie", repr(serializer.loads(jar[name].value)))

    def logs(self, records: list[logging.LogRecord]) -> None:
        formatter = logging.Formatter("%(name)s %(message)s")
        for record in records:
            self.scan(f"log {record.name}:{record.levelname}", formatter.format(record))


def key_prefixes() -> set[str]:
    with db.engine.connect() as conn:
        return set(conn.scalars(select(ApiKey.prefix)))


def build_world(app, hunter: Hunter) -> World:
    """Two tenants whose every secret is a canary; returns tenant A, the one swept."""
    worlds = []
    for name in ("Canary A", "Canary B"):
        tenant = factories.make_tenant(name)
        users, passwords = {}, {}
        for role in ((Role.owner, Role.admin, Role.viewer) if name.endswith("A")
                     else (Role.owner,)):
            password = hunter.plant(f"{name} {role.value} password", canary(f"pw{role.value}"))
            email = f"{role.value}@{name.lower().replace(' ', '-')}.test"
            users[role] = factories.make_user(email, tenant, role, password=password)
            passwords[email] = password
        _, full = factories.make_key(tenant, name="canary full")
        _, scoped = factories.make_key(tenant, full_access=False,
                                       capabilities=("manage_vector_stores",), name="scoped")
        hunter.plant(f"{name} full-access key", full)
        hunter.plant(f"{name} capability key", scoped)
        value = hunter.plant(f"{name} encrypted column value", canary("enc"))
        planted.seed_every_encrypted_column(tenant, value)
        rows = routes.Rows(factories.TenantUsers(tenant, users))
        # A run whose command printed the secret its environment held (issue 11 item 1):
        # its history, its events and the Playground show it masked.
        rows.cache["run_id"] = routes.make_printed_run(
            rows.world, f"the env said {value}\n", (value,))
        # A pending invitation's token: shown once when created, then only its hash is kept;
        # the accept page it opens must not repeat it. The sweep opens that page with it.
        _, token = factories.make_invitation(tenant, f"invitee@{name.lower()[-1]}.test")
        rows.cache["token"] = hunter.plant(f"{name} invitation token", token)
        worlds.append(World(tenant, users, passwords, full, rows))
    return worlds[0]


NEED_A_SANDBOX = {"GET /api/v1/sessions/<uuid:session_id>/files",
                  "GET /api/v1/sessions/<uuid:session_id>/files/content"}
# Answers only WebSocket requests (tests/api/test_session_terminal.py opens it with a
# ticket); a plain GET is a 400.
WEBSOCKET_ONLY = "GET /api/v1/sessions/<uuid:session_id>/terminal"

class Sweep:
    def __init__(self, app, world: World, hunter: Hunter, login_as):
        self.app, self.world, self.hunter, self.login_as = app, world, hunter, login_as
        self.forms: dict[str, dict[str, str]] = {}
        self.owner = world.users[Role.owner]
        self.statuses: dict[tuple[str, str], int] = {}

    def identities(self, route: routes.Route):
        yield "anonymous", self.app.test_client(), {}
        if route.is_api:
            claims = tokens.TokenClaims(self.owner.id, self.world.tenant.id,
                                        self.owner.session_version)
            token = tokens.issue(claims, self.app.config["SECRET_KEY"], 600)[0]
            yield "owner bearer", self.app.test_client(), {"Authorization": f"Bearer {token}"}
            yield "full-access key", self.app.test_client(), {"X-API-Key": self.world.key}
        else:
            yield "owner session", self.login_as(self.owner, self.world.tenant), {}

    def body(self, route: routes.Route, path: str):
        if route.is_api:
            return routes.example_json(self.app, route, factories.TenantUsers(
                self.world.tenant, self.world.users), self.world.request_secret), None
        return None, self.forms.get(path, {})

    def run(self, route: routes.Route) -> None:
        path = routes.build_path(self.app, route, self.world.rows.values(route))
        for who, client, headers in self.identities(route):
            json, data = self.body(route, path)
            before = key_prefixes() if route.mutating else set()
            response = routes.call(self.app, client, route.method, path, headers=headers,
                                   json=json, data=data, csrf=route.mutating and not route.is_api)
            new_keys = frozenset(key_prefixes() - before) if route.mutating else frozenset()
            self.statuses[(route.id, who)] = response.status_code
            self.hunter.response(f"{route.id} as {who}", response, new_keys)
            if route.method == "GET" and response.mimetype == "text/html":
                self.learn_forms(response.get_data(as_text=True), path)

    def learn_forms(self, page: str, path: str) -> None:
        """Remember each form's fields by its target, to post plausible data there later."""
        for target, values in forms.forms_in(page, path, self.world.request_secret).items():
            self.forms.setdefault(target, values)


def test_no_secret_reaches_a_response_a_cookie_or_a_log(app, login_as, caplog, live_server):
    hunter = Hunter(app, {})
    world = build_world(app, hunter)
    old_key = planted.new_key()
    with planted.vault() as vault:
        with planted.using_keys(app, [old_key]):
            db.session.execute(vault.insert(), [{"label": "v", "secret": hunter.plant(
                "throwaway encrypted value", canary("vault")),
                "doc": {"k": hunter.plant("throwaway encrypted document", canary("doc"))}}])
            db.session.commit()
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        for name in ("werkzeug", "sandlot"):
            caplog.set_level(logging.DEBUG, logger=name)
        # SQL echo (statements and bound parameters, which are already encrypted) must be
        # clean too. Not DEBUG: SQLAlchemy's row echo prints decrypted result rows, an
        # explicit operator choice (echo="debug") that no setting of ours turns on.
        caplog.set_level(logging.INFO, logger="sqlalchemy.engine")

        # Key rotation, through the service and the CLI, must not print what it rotates.
        with planted.using_keys(app, [*app.config["SECRETS_KEYS"], old_key]):
            report = secret_service.rotate_all([vault])
            cli = app.test_cli_runner().invoke(args=["secrets", "rotate"])
        assert report.total_rotated == 2
        hunter.scan("rotation report", "\n".join(report.lines()))
        hunter.scan("flask secrets rotate", cli.output)
        for column in ("secret", "doc"):
            for token in planted.raw_tokens(vault, column):
                hunter.scan(f"stored {vault.name}.{column}", token)
        db.session.commit()

        sweep = Sweep(app, world, hunter, login_as)
        every = routes.iter_routes(app)
        for route in [r for r in every if not r.mutating]:
            sweep.run(route)
        for route in sorted((r for r in every if r.mutating), key=destructive):
            sweep.run(route)

        # The sweep must have seen real pages, not only refusals. The session's files need
        # a running sandbox, which this world does not start (tests/api/test_session_files.py
        # reads them from a real one): without it they answer 409 sandbox_not_bound.
        refused = {k: v for k, v in sweep.statuses.items()
                   if k[1].startswith("owner") and k[0].startswith("GET") and v >= 400
                   and not (k[0] in NEED_A_SANDBOX and v == 409)
                   and not (k[0] == WEBSOCKET_ONLY and v == 400)}
        assert not refused, f"owner GETs that did not succeed: {refused}"
        explicit_logins(app, world, hunter)
        over_http(live_server, world, hunter)
        hunter.logs(caplog.records)

    assert caplog.records, "no log records were captured; the log check would be vacuous"
    assert not hunter.leaks, "secrets leaked:\n" + "\n".join(sorted(set(hunter.leaks)))


def destructive(route: routes.Route) -> tuple[bool, bool]:
    """Sort key: creations and edits first, then removals, sign-out last."""
    removes = route.method == "DELETE" or any(
        word in route.endpoint for word in ("remove", "revoke", "delete"))
    return removes, route.endpoint.endswith("logout")


def explicit_logins(app, world: World, hunter: Hunter) -> None:
    """Sign in right and wrong, by API and by form, with the canary passwords."""
    email = world.users[Role.owner].email
    for password in (world.passwords[email], world.request_secret):
        client = app.test_client()
        response = routes.call(app, client, "POST", "/api/v1/auth/login",
                               json={"email": email, "password": password})
        hunter.response("API login", response)
        response = routes.call(app, client, "POST", routes.login_path(app), csrf=True,
                               data={"email": email, "password": password})
        hunter.response("web login", response)


def over_http(base: str, world: World, hunter: Hunter) -> None:
    """The same through the real server, so werkzeug's request log is exercised too."""
    email = world.users[Role.owner].email
    for password in (world.passwords[email], world.request_secret):
        response = requests.post(f"{base}/api/v1/auth/login", timeout=10,
                                 json={"email": email, "password": password})
        hunter.scan("HTTP login", response.text + repr(dict(response.headers)))
    response = requests.get(f"{base}/api/v1/auth/me", headers={"X-API-Key": world.key},
                            timeout=10)
    assert response.status_code == 200
    hunter.scan("HTTP /auth/me", response.text + repr(dict(response.headers)))
