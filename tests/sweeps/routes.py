"""Routes read from url_map, URLs filled with real rows, example bodies, and a database
fingerprint that tells whether a request wrote anything."""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from flask import Flask, url_for
from itsdangerous import URLSafeTimedSerializer
from sqlalchemy import select
from werkzeug.routing import Rule

from app import create_app
from app.auth.guards import Guard
from app.extensions import db
from app.models import ApiKey, Job, JobStatus
from app.security import apikeys
from app.services import audit
from app.services.identity.api_keys import CAPABILITIES
from tests import factories

SKIPPED_ENDPOINTS = {"static"}
IGNORED_METHODS = {"HEAD", "OPTIONS"}
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
# Columns a request may legitimately touch without "writing" anything the caller asked for.
VOLATILE_COLUMNS = {("api_keys", "last_used_at")}


@dataclass(frozen=True)
class Route:
    endpoint: str
    rule: str
    method: str
    arguments: tuple[str, ...]
    guard: Guard | None
    public: bool

    @property
    def id(self) -> str:
        return f"{self.method} {self.rule}"

    @property
    def is_api(self) -> bool:
        return self.rule.startswith("/api/")

    @property
    def mutating(self) -> bool:
        return self.method in MUTATING


def iter_routes(app: Flask) -> list[Route]:
    """Every (rule, method) of the app except `static`, in a stable order."""
    found = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in SKIPPED_ENDPOINTS:
            continue
        view = app.view_functions[rule.endpoint]
        for method in sorted((rule.methods or set()) - IGNORED_METHODS):
            found.append(Route(
                endpoint=rule.endpoint, rule=rule.rule, method=method,
                arguments=tuple(sorted(rule.arguments)), guard=getattr(view, "guard", None),
                public=bool(getattr(view, "public", False)),
            ))
    return sorted(found, key=lambda r: (r.rule, r.method))


@cache
def collection_app() -> Flask:
    """An app built at import time only to read its url_map (create_app does no I/O)."""
    return create_app({"ENV": "testing"})


def route_id(route: Route) -> str:
    return route.id


def view_of(app: Flask, route: Route) -> Callable:
    return app.view_functions[route.endpoint]


def rule_of(app: Flask, route: Route) -> Rule:
    return next(r for r in app.url_map.iter_rules()
                if r.endpoint == route.endpoint and r.rule == route.rule)


# ---------------------------------------------------------------- path parameters

def _member_id(world: factories.TenantUsers) -> int:
    # The viewer's membership: removing or re-roling it is a legal, visible write.
    return world.membership(world.viewer).id


def _key_id(world: factories.TenantUsers) -> int:
    key, _ = factories.make_key(world.tenant, name="sweep target key")
    return key.id


def _job_id(world: factories.TenantUsers) -> str:
    """A finished audit export, shaped as the real job leaves it."""
    csv_text, rows = audit.to_csv([])
    job = Job(id=str(uuid.uuid4()), tenant_id=world.tenant.id, kind="audit_export",
              status=JobStatus.succeeded, percent=100, stage="done", log="", params={},
              result={"rows": rows, "total": rows, "truncated": False, "csv": csv_text},
              timeout_sec=60, started_at=datetime.now(UTC), finished_at=datetime.now(UTC))
    db.session.add(job)
    db.session.commit()
    return job.id


def _check_id(world: factories.TenantUsers) -> str:
    """A finished sandbox check job, shaped as the real one leaves it."""
    row = {"name": "api_url_reachable", "ok": True, "message": "answered", "reason": "",
           "latency_ms": 3}
    job = Job(id=str(uuid.uuid4()), tenant_id=world.tenant.id, kind="sandbox_check",
              status=JobStatus.succeeded, percent=100, stage="done", params={"deep": False},
              result={"ok": True, "provider": "docker", "deep": False, "checks": [row],
                      "capabilities": {}}, log="", timeout_sec=60,
              started_at=datetime.now(UTC), finished_at=datetime.now(UTC))
    db.session.add(job)
    db.session.commit()
    return job.id


def _build_id(world: factories.TenantUsers) -> str:
    """A finished template build job (reference 3.1.7), shaped as the real one leaves it."""
    job = Job(id=str(uuid.uuid4()), tenant_id=world.tenant.id, kind="provision_templates",
              status=JobStatus.succeeded, percent=100, stage="ready", log="",
              params={"work": [{"role": "standard", "replace": False}]},
              result={"templates": [], "standard_template_id": "sandlot-standard-1",
                      "desktop_template_id": "", "provisioned": True,
                      "built": {"standard": "sandlot-standard-1"}, "switched_configs": 0},
              target_type="template_identity", target_id="0" * 32, timeout_sec=60,
              started_at=datetime.now(UTC), finished_at=datetime.now(UTC))
    db.session.add(job)
    db.session.commit()
    return job.id


def _invitation_id(world: factories.TenantUsers) -> int:
    return factories.make_invitation(world.tenant, _new_email())[0].id


def _invitation_token(world: factories.TenantUsers) -> str:
    """The token of a pending invitation of the tenant (the accept page's URL)."""
    return factories.make_invitation(world.tenant, _new_email())[1]


def _tenant_id(world: factories.TenantUsers) -> int:
    return world.tenant.id


def make_sandbox_config(tenant, secret: str = "sweep-secret-value") -> str:
    """A live E2B config whose provider is a closed loopback port (no traffic leaves)."""
    from app.models import SandboxConfig
    from app.services.sandboxes import document

    doc = document.validate(factories.config_doc(
        "e2b", {"api_key": secret}, env_vars={"SWEEP_TOKEN": secret}), resolve_urls=False)
    row = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant.id,
                        name=f"sweep {uuid.uuid4().hex[:6]}", description="",
                        sandbox_type="e2b", config=doc)
    db.session.add(row)
    db.session.commit()
    return row.id


def _config_id(world: factories.TenantUsers) -> str:
    return make_sandbox_config(world.tenant)


def _session_id(world: factories.TenantUsers) -> str:
    """The owner's own session (sessions are private to their user) on a sweep config;
    the one `run_id` made its run in, when it came first (arguments resolve sorted)."""
    from app.models import SandboxSession
    from app.services.sessions import lifecycle as sessions

    existing = db.session.scalar(select(SandboxSession.id).where(
        SandboxSession.tenant_id == world.tenant.id, SandboxSession.user_id == world.owner.id,
        SandboxSession.title == "sweep"))
    if existing:
        return existing
    config_id = make_sandbox_config(world.tenant)
    return sessions.create_session(world.tenant, world.owner, config_id, "sweep").id


def _request_id(world: factories.TenantUsers) -> str:
    """A pending egress access request of the owner's sweep session."""
    from app.models import SandboxSession
    from app.services.sandboxes import egress_access

    session = db.session.get(SandboxSession, _session_id(world))
    return egress_access.request_access(world.tenant, world.owner, session, "sweep.example",
                                        "the sweep").id


def make_run(session_id: str, stdout: str = "sweep output\n") -> str:
    """A finished run of `session_id`, as a run's thread leaves it (no sandbox needed)."""
    from app.models import ExecRun, RunStatus, SandboxSession

    session = db.session.get(SandboxSession, session_id)
    run = ExecRun(id=str(uuid.uuid4()), tenant_id=session.tenant_id, session_id=session.id,
                  user_id=session.user_id, command="echo sweep", status=RunStatus.succeeded,
                  exit_code=0, duration_ms=5, stdout=stdout, stdout_bytes=len(stdout))
    db.session.add(run)
    db.session.commit()
    return run.id


def make_printed_run(world: factories.TenantUsers, printed: str,
                     secrets: tuple[str, ...]) -> str:
    """A run of the owner's sweep session that printed `printed` while its environment
    held `secrets`, stored through the runs' own writer (which masks them)."""
    from app.models import RunStatus
    from app.services.sessions import runs

    session_id = _session_id(world)
    run_id = make_run(session_id, stdout="")
    writer = runs._RunWriter({"id": run_id, "session_id": session_id})
    writer.persisted = True  # the row exists: output and verdict are updates, as after a 202
    writer.hooks.secrets = secrets
    writer.output(1, printed.encode())
    writer._finish(RunStatus.succeeded, 0, 5)
    return run_id


def _run_id(world: factories.TenantUsers) -> str:
    return make_run(_session_id(world))


def make_catalog_skill(tenant, name: str | None = None) -> str:
    """A catalog skill registered through the real service from a real zip (bundle stored)."""
    import io

    from app.services.skills import catalog as skills
    from tests.fakes import skill_archives

    archive = skill_archives.make_zip(skill_archives.skill_files(
        name or f"sweep-{uuid.uuid4().hex[:6]}"))
    return skills.register_upload(tenant, audit.SystemActor("sweep"), io.BytesIO(archive)).id


def _catalog_id(world: factories.TenantUsers) -> str:
    return make_catalog_skill(world.tenant)


def make_installed_skill(tenant, config_id: str | None = None,
                         secret: str = "sweep-env-value") -> str:
    """A ready skill on `config_id` (default: the tenant's newest config) built from a real
    stored bundle, declaring SWEEP_ENV with the admin value `secret`. It is in no image, so
    an uninstall needs no provider."""
    from app.models import InstalledSkill, InstallStatus, SandboxConfig, SkillCatalogEntry

    config_id = config_id or db.session.scalar(
        select(SandboxConfig.id).where(SandboxConfig.tenant_id == tenant.id,
                                       SandboxConfig.deleted_at.is_(None))
        .order_by(SandboxConfig.created_at.desc())) or make_sandbox_config(tenant)
    entry = db.session.get(SkillCatalogEntry, make_catalog_skill(tenant))
    row = InstalledSkill(
        id=str(uuid.uuid4()), tenant_id=tenant.id, sandbox_config_id=config_id,
        catalog_id=entry.id, name=entry.name, version=entry.version,
        description=entry.description, instructions=entry.instructions,
        bundle_ref=entry.bundle_ref, bundle_sha256=entry.bundle_sha256,
        status=InstallStatus.ready, enabled=True,
        envs=[{"name": "SWEEP_ENV", "description": "", "required": False}],
        env_values={"SWEEP_ENV": secret},
        install_session_id=str(uuid.uuid4()), install_message_id=str(uuid.uuid4()))
    db.session.add(row)
    db.session.commit()
    _install_transcript(row, secret)
    return row.id


def _install_transcript(row, secret: str) -> None:
    """The finished run's events, as the pipeline writes them, so the install-events and
    transcript streams have bodies to sweep; the installer echoed the value (masked)."""
    from app.services.skills.installs.events import EventLog

    events = EventLog(row.tenant_id, row.id, row.install_message_id, secrets=[secret])
    events.emit("accepted", 10)
    events.command("sh install.sh", 1)
    events.output(f"SWEEP_ENV={secret}\n[exit code 0]")
    events.emit("done", 100, status="ready")


def _skill_id(world: factories.TenantUsers) -> str:
    # Arguments resolve in sorted order, so `config_id` (if the route has one) was made
    # just before: the skill lands on that config.
    return make_installed_skill(world.tenant)


# url_map parameter name -> a real row of the given tenant (its id is what goes in the URL).
# A route with a parameter missing here fails the sweep: add a factory for it.
PARAM_ROWS: dict[str, Callable[[factories.TenantUsers], Any]] = {
    "member_id": _member_id,
    "membership_id": _member_id,
    "key_id": _key_id,
    "job_id": _job_id,
    "check_id": _check_id,
    "build_id": _build_id,
    "tenant_id": _tenant_id,
    "config_id": _config_id,
    "session_id": _session_id,
    "run_id": _run_id,
    "catalog_id": _catalog_id,
    "invitation_id": _invitation_id,
    "token": _invitation_token,
    "skill_id": _skill_id,
    "request_id": _request_id,
    "decision": lambda world: "decline",
}


def unknown_params(route: Route) -> list[str]:
    return [name for name in route.arguments if name not in PARAM_ROWS]


@dataclass
class Rows:
    """Per-tenant cache of the rows that path parameters point at."""

    world: factories.TenantUsers
    cache: dict[str, Any] = field(default_factory=dict)

    def values(self, route: Route) -> dict[str, Any]:
        missing = unknown_params(route)
        if missing:
            raise LookupError(
                f"{route.id} has path parameter(s) {missing} the sweep does not know; add a "
                "factory of a tenant-owned row to PARAM_ROWS in tests/sweeps/routes.py")
        for name in route.arguments:
            if name not in self.cache:
                self.cache[name] = PARAM_ROWS[name](self.world)
        return {name: self.cache[name] for name in route.arguments}


def build_path(app: Flask, route: Route, values: dict[str, Any]) -> str:
    return rule_of(app, route).build(values, append_unknown=False)[1]


def login_path(app: Flask) -> str:
    with app.test_request_context():
        return url_for(app.login_manager.login_view)


# ---------------------------------------------------------------- bodies

def _example_from_schema(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    if "$ref" in schema:
        return _example_from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][-1]
    if "default" in schema:
        return schema["default"]
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        return _example_from_schema(options[0], defs) if options else None
    kind = schema.get("type")
    if kind == "object":
        required = set(schema.get("required", []))
        return {name: _example_from_schema(sub, defs)
                for name, sub in schema.get("properties", {}).items() if name in required}
    if kind == "array":
        return []
    if kind == "integer":
        return max(1, schema.get("minimum", 1))
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if schema.get("format") == "email":
        return f"sweep-{secrets.token_hex(3)}@example.test"
    if schema.get("format") == "date-time":
        return (datetime.now(UTC) + timedelta(days=30)).isoformat()
    return "sweep".ljust(schema.get("minLength", 1), "x")


def _new_email() -> str:
    return f"new-{secrets.token_hex(4)}@sweep.test"


# Hand-written bodies where a generic example would be refused before doing anything.
# Each takes (the caller's tenant world, a secret to put where secrets go).
EXAMPLES: dict[str, Callable[[factories.TenantUsers, str], dict[str, Any]]] = {
    "api.login": lambda w, secret: {"email": w.owner.email, "password": secret},
    "api.create_invitation": lambda w, secret: {"email": _new_email(), "role": "viewer"},
    "api.accept_invitation": lambda w, secret: {"token": secret},
    "api.change_role": lambda w, secret: {"role": "contributor"},
    "api.create_api_key": lambda w, secret: {"name": "sweep key", "full_access": True},
}


def example_json(app: Flask, route: Route, world: factories.TenantUsers,
                 secret: str = "sweep-Password-123") -> dict[str, Any] | None:
    """A plausible JSON body for an API route (None when the route takes no body)."""
    if route.endpoint in EXAMPLES:
        return EXAMPLES[route.endpoint](world, secret)
    info = getattr(view_of(app, route), "api_doc", None)
    if info is None or info.request is None:
        return {} if route.mutating else None
    schema = info.request.model_json_schema()
    return _example_from_schema(schema, schema.get("$defs", {}))


# ---------------------------------------------------------------- keys and CSRF

def pepper(app: Flask) -> str:
    return app.config.get("API_KEY_PEPPER") or app.config["SECRET_KEY"]


def key_kinds() -> list[str]:
    """The kinds of API key the sweep holds: full access, each capability, and none."""
    return ["full", *(f"cap:{c}" for c in CAPABILITIES), "bare"]


def make_key_of_kind(app: Flask, tenant, kind: str) -> str:
    """A usable key of `tenant`; `bare` has neither full access nor any capability."""
    if kind == "full":
        return factories.make_key(tenant, name="sweep full")[1]
    if kind.startswith("cap:"):
        return factories.make_key(tenant, full_access=False, capabilities=(kind[4:],),
                                  name=f"sweep {kind}")[1]
    # The service refuses a key without scope; insert one directly to test the guard.
    material = apikeys.new_key()
    db.session.add(ApiKey(tenant_id=tenant.id, name="sweep bare", prefix=material.prefix,
                          digest=apikeys.digest(material.plaintext, pepper(app)),
                          full_access=False, capabilities=[]))
    db.session.commit()
    return material.plaintext


def key_should_pass(policy: str, kind: str) -> bool:
    """The reference's key policy, written out independently of `Guard.key_allows`."""
    if policy == "refused":
        return False
    if policy == "any_key":
        return True
    if policy == "full_access":
        return kind == "full"
    return kind in ("full", f"cap:{policy}")


def csrf_token(app: Flask, client) -> str:
    """A valid CSRF token for `client`'s session, without rendering any page."""
    with client.session_transaction() as session:
        raw = session.setdefault("csrf_token", secrets.token_hex(20))
    secret = app.config.get("WTF_CSRF_SECRET_KEY") or app.secret_key
    return URLSafeTimedSerializer(secret, salt="wtf-csrf-token").dumps(raw)


def call(app: Flask, client, method: str, path: str, *, headers: dict | None = None,
         json: Any = None, data: Any = None, csrf: bool = False):
    """One request, with a CSRF token when asked, its body read before returning.

    It runs inside a fresh app context so that nothing the request leaves in `g` or in the
    scoped database session can be seen by the next one (a real server never shares them).
    """
    headers = dict(headers or {})
    if csrf:
        token = csrf_token(app, client)
        headers["X-CSRFToken"] = token
        if json is None:
            data = {**(data or {}), "csrf_token": token}
    with app.app_context():
        response = client.open(path, method=method, headers=headers, json=json, data=data)
        read_body(response)  # buffer the body before the context goes
        return response


def read_body(response, seconds: float = 1.0) -> bytes:
    """The body; for an event stream, what arrives within `seconds` (streams never end)."""
    if response.mimetype != "text/event-stream":
        return response.get_data()
    chunks: list[bytes] = []

    def pump() -> None:
        for chunk in response.response:
            chunks.append(chunk if isinstance(chunk, bytes) else chunk.encode())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    reader.join(seconds)
    response.set_data(b"".join(chunks))
    return response.get_data()


# ---------------------------------------------------------------- writes

def fingerprint() -> dict[str, list[tuple]]:
    """Every row of every table (minus volatile columns), read on a fresh connection."""
    state: dict[str, list[tuple]] = {}
    with db.engine.connect() as conn:
        for table in db.metadata.sorted_tables:
            columns = [c for c in table.columns if (table.name, c.name) not in VOLATILE_COLUMNS]
            query = select(*columns).order_by(*table.primary_key.columns)
            state[table.name] = [tuple(row) for row in conn.execute(query)]
    return state


def describe_change(before: dict[str, list[tuple]], after: dict[str, list[tuple]]) -> str:
    changed = []
    for name in before:
        if before[name] != after[name]:
            changed.append(f"{name}: {len(before[name])} -> {len(after[name])} rows"
                           if len(before[name]) != len(after[name]) else f"{name}: rows changed")
    return ", ".join(changed)
