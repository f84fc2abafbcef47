"""Every route in url_map answers its guard: no credentials, too-low roles, API-key policies
and foreign ids, checked generically so that routes added later are swept too."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from app.models import ROLE_ORDER
from tests.sweeps import endpoints, forms, routes, world
from tests.sweeps.routes import Route

ALL_ROUTES = routes.iter_routes(routes.collection_app())
GUARDED = [r for r in ALL_ROUTES if r.guard is not None]


def test_every_endpoint_has_a_guard_or_is_public(app):
    problems = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in routes.SKIPPED_ENDPOINTS:
            continue
        view = app.view_functions[rule.endpoint]
        guarded, public = hasattr(view, "guard"), getattr(view, "public", False) is True
        if not guarded and not public:
            problems.append(f"{rule.rule} ({rule.endpoint}): neither @guard(...) nor @public")
        if guarded and public:
            problems.append(f"{rule.rule} ({rule.endpoint}): both @guard and @public")
    assert not problems, "\n".join(problems)


def test_sweep_sees_the_same_routes_as_the_test_app(app):
    assert routes.iter_routes(app) == ALL_ROUTES


def test_every_path_parameter_has_a_row_factory(app):
    unknown = [f"{r.id}: {routes.unknown_params(r)}" for r in routes.iter_routes(app)
               if routes.unknown_params(r)]
    assert not unknown, (
        "routes with path parameters the sweep cannot fill; add a factory of a tenant-owned "
        "row to PARAM_ROWS in tests/sweeps/routes.py:\n" + "\n".join(unknown))


def test_public_get_routes_answer_anonymous_callers(app, client):
    for route in ALL_ROUTES:
        if not route.public or route.method != "GET" or route.arguments:
            continue
        response = routes.call(app, client, "GET", route.rule)
        assert response.status_code not in (401, 403), route.id
        assert urlsplit(response.headers.get("Location", "")).path != routes.login_path(app)


# Reference section 2.3, the route guard table: (method, path, minimum role, key policy).
# Routes appear here before they exist; each is checked once url_map has it.
V, A, AUTH = "viewer", "admin", None
REFERENCE_GUARDS = [
    ("GET", "/sandbox-configs", V, "full_access"),
    ("PUT", "/sandbox-configs/workspace-policy", A, "full_access"),
    ("POST", "/sandbox-configs/templates/query", A, "full_access"),
    ("POST", "/sandbox-configs", A, "full_access"),
    ("GET", "/sandbox-configs/:id", V, "full_access"),
    ("PUT", "/sandbox-configs/:id", A, "full_access"),
    ("DELETE", "/sandbox-configs/:id", A, "full_access"),
    ("GET", "/sandbox-configs/:id/sandboxes", A, "full_access"),
    ("GET", "/sandbox-configs/:id/skills", A, "full_access"),
    ("POST", "/sandbox-configs/:id/skills", A, "full_access"),
    ("GET", "/sandbox-configs/:id/skills/:skillId", A, "full_access"),
    ("PATCH", "/sandbox-configs/:id/skills/:skillId", A, "full_access"),
    ("DELETE", "/sandbox-configs/:id/skills/:skillId", A, "full_access"),
    ("GET", "/sandbox-configs/:id/skills/:skillId/files", A, "full_access"),
    ("GET", "/sandbox-configs/:id/skills/:skillId/files/content", A, "full_access"),
    ("POST", "/sandbox-configs/:id/skills/:skillId/reinstall", A, "full_access"),
    ("POST", "/sandbox-configs/:id/skills/:skillId/stop", A, "full_access"),
    ("GET", "/sandbox-configs/:id/skills/:skillId/guidance", A, "full_access"),
    ("POST", "/sandbox-configs/:id/skills/:skillId/guidance", A, "full_access"),
    ("GET", "/sandbox-configs/:id/skills/:skillId/install-events", A, "full_access"),
    ("GET", "/sandbox-configs/:id/skills/:skillId/transcript", A, "full_access"),
    ("GET", "/skills", V, "refused"),
    ("GET", "/skills/catalog", V, "refused"),
    ("POST", "/skills/catalog", A, "full_access"),
    ("POST", "/skills/catalog/:id/install", A, "full_access"),
    ("GET", "/skills/catalog/:id/files", A, "full_access"),
    ("GET", "/skills/catalog/:id/files/content", A, "full_access"),
    ("DELETE", "/skills/catalog/:id", A, "full_access"),
    ("PUT", "/skills/catalog/:id/categories", A, "full_access"),
    ("POST", "/system/sandbox-check", A, "manage_vector_stores"),
    ("GET", "/me/env-vars", AUTH, "refused"),
    ("PUT", "/me/env-vars/skill", AUTH, "refused"),
    ("DELETE", "/me/env-vars/skill", AUTH, "refused"),
    ("PUT", "/me/env-vars/sandbox", AUTH, "refused"),
    ("DELETE", "/me/env-vars/sandbox", AUTH, "refused"),
    # Decisions 12 (not in the reference): admins list and end every member's session.
    ("GET", "/workspace/sessions", A, "full_access"),
    ("DELETE", "/workspace/sessions/:id", A, "full_access"),
]


def _shape(path: str) -> tuple[str, ...]:
    """Path segments with every parameter (`:id` or `<int:id>`) reduced to `*`."""
    return tuple("*" if p.startswith((":", "<")) else p for p in path.strip("/").split("/"))


def test_guards_follow_the_reference_table():
    by_shape = {(r.method, _shape(r.rule.removeprefix("/api/v1"))): r
                for r in ALL_ROUTES if r.is_api}
    problems = []
    for method, path, role, policy in REFERENCE_GUARDS:
        route = by_shape.get((method, _shape(path)))
        if route is None:
            continue  # not built yet
        guard = route.guard
        actual = (guard.role.value if guard and guard.role else None, guard and guard.api_key)
        if guard is None or actual != (role, policy):
            problems.append(f"{method} {path}: reference says {(role, policy)}, "
                            f"the route declares {actual}")
    assert not problems, "\n".join(problems)


class GuardSweep:
    """All guard checks of one (rule, method); problems are collected, then reported."""

    def __init__(self, app, route: Route, two_tenants, login_as, bearer):
        self.app, self.route, self.login_as, self.bearer = app, route, login_as, bearer
        self.a, self.b = two_tenants
        self.own = routes.Rows(self.a)
        self.foreign = routes.Rows(self.b)
        self.problems: list[str] = []

    # -- plumbing

    def path(self, foreign: bool = False) -> str:
        rows = self.foreign if foreign else self.own
        return routes.build_path(self.app, self.route, rows.values(self.route))

    def send(self, client, *, foreign=False, headers=None, path=None):
        body = routes.example_json(self.app, self.route, self.a) if self.route.is_api else None
        return routes.call(
            self.app, client, self.route.method, path or self.path(foreign), headers=headers,
            json=body, csrf=self.route.mutating and not self.route.is_api,
        )

    def expect(self, who: str, response, status: int, code: str | None = None) -> None:
        if response.status_code != status:
            self.problems.append(
                f"{who}: expected {status}, got {response.status_code} "
                f"{response.get_data(as_text=True)[:200]!r}")
            return
        if self.route.is_api and code is not None:
            body = response.get_json(silent=True) or {}
            error = body.get("error") if isinstance(body, dict) else None
            if body.get("success") is not False or not isinstance(error, dict) \
                    or error.get("code") != code or not isinstance(error.get("message"), str):
                self.problems.append(f"{who}: not a {code!r} envelope: {body!r}")

    def refused(self, who: str, client, status: int, code: str, *, foreign=False,
                headers=None):
        """Send, expect a refusal, and check that the refused request wrote nothing."""
        path = self.path(foreign)  # creates the rows it points at: before the fingerprint
        before = routes.fingerprint()
        response = self.send(client, headers=headers, path=path)
        self.expect(who, response, status, code)
        change = routes.describe_change(before, routes.fingerprint())
        if change:
            self.problems.append(f"{who}: a refused request wrote to the database: {change}")
        return response

    def allowed(self, who: str, client, headers=None) -> None:
        response = self.send(client, headers=headers)
        # A browser GET refused for lack of a session redirects to login; a POST may end at
        # the login page legitimately (logout), so only its status counts.
        to_login = (response.status_code == 302 and self.route.method == "GET"
                    and urlsplit(response.headers["Location"]).path
                    == routes.login_path(self.app))
        if response.status_code in (401, 403) or to_login:
            self.problems.append(f"{who}: should pass the guard, got {response.status_code} "
                                 f"{response.get_data(as_text=True)[:200]!r}")

    def user_client(self, user, tenant):
        if self.route.is_api:
            api = self.bearer(user, tenant)
            return api.client, api.headers
        return self.login_as(user, tenant), {}

    # -- the checks

    def no_credentials(self) -> None:
        client = self.app.test_client()
        login = routes.login_path(self.app)
        if self.route.is_api:
            self.refused("anonymous", client, 401, "unauthorized")
            for label, header in (("garbage bearer", {"Authorization": "Bearer not.a.jwt"}),
                                  ("garbage key", {"X-API-Key": "sl_deadbeef_not-a-key"}),
                                  ("foreign-shaped key", {"X-API-Key": "not-our-shape"})):
                self.refused(label, client, 401, "unauthorized", headers=header)
            return
        response = self.refused("anonymous", client, 302, None)
        if response.status_code == 302 and urlsplit(response.headers["Location"]).path != login:
            self.problems.append(f"anonymous: redirected to {response.headers['Location']}")
        response = self.send(self.app.test_client(), headers={"HX-Request": "true"})
        target = response.headers.get("HX-Redirect")
        if target is None or urlsplit(target).path != login:
            self.problems.append(f"anonymous htmx: expected HX-Redirect to {login}, got "
                                 f"{response.status_code} HX-Redirect={target!r}")
        # A browser route never accepts an API key in place of a session.
        key = routes.make_key_of_kind(self.app, self.a.tenant, "full")
        response = self.refused("API key on a browser route", self.app.test_client(), 302,
                                None, headers={"X-API-Key": key})

    def roles_below(self) -> None:
        minimum = self.route.guard.role
        if minimum is None:
            return
        for role in ROLE_ORDER[:minimum.rank]:
            client, headers = self.user_client(self.a.by_role[role], self.a.tenant)
            self.refused(f"{role.value} (below {minimum.value})", client, 403, "forbidden",
                         headers=headers)

    def keys_refused(self) -> None:
        if not self.route.is_api:
            return
        policy = self.route.guard.api_key
        for kind in routes.key_kinds():
            if not routes.key_should_pass(policy, kind):
                key = routes.make_key_of_kind(self.app, self.a.tenant, kind)
                self.refused(f"{kind} key on policy {policy}", self.app.test_client(), 403,
                             "forbidden", headers={"X-API-Key": key})

    def foreign_ids(self) -> None:
        if not self.route.arguments:
            return
        minimum = self.route.guard.role
        for user in (self.a.owner, self.a.admin):
            role = self.a.membership(user).role
            if minimum is not None and not role.at_least(minimum):
                continue
            client, headers = self.user_client(user, self.a.tenant)
            self.refused(f"tenant-A {role.value} on tenant-B ids", client, 404, "not_found",
                         foreign=True, headers=headers)
        if self.route.is_api and routes.key_should_pass(self.route.guard.api_key, "full"):
            key = routes.make_key_of_kind(self.app, self.a.tenant, "full")
            self.refused("tenant-A full-access key on tenant-B ids", self.app.test_client(),
                         404, "not_found", foreign=True, headers={"X-API-Key": key})

    def passes(self) -> None:
        """The guard lets the least role and every key its policy names through."""
        minimum = self.route.guard.role
        user = self.a.by_role[minimum] if minimum is not None else self.a.viewer
        client, headers = self.user_client(user, self.a.tenant)
        self.allowed(f"{user.email} (least role allowed)", client, headers)
        if self.route.is_api:
            for kind in routes.key_kinds():
                if routes.key_should_pass(self.route.guard.api_key, kind):
                    key = routes.make_key_of_kind(self.app, self.a.tenant, kind)
                    self.allowed(f"{kind} key", self.app.test_client(), {"X-API-Key": key})


@pytest.fixture
def two_worlds(app):
    """`two_tenants`, restored from a copy instead of re-hashing eight passwords per route."""
    return world.two_tenants()


@pytest.mark.parametrize("route", GUARDED, ids=routes.route_id)
def test_guard(route: Route, app, two_worlds, login_as, bearer):
    if routes.unknown_params(route):
        pytest.fail(f"{route.id}: unknown path parameters {routes.unknown_params(route)}; "
                    "extend PARAM_ROWS in tests/sweeps/routes.py")
    sweep = GuardSweep(app, route, two_worlds, login_as, bearer)
    sweep.no_credentials()
    sweep.roles_below()
    sweep.keys_refused()
    sweep.foreign_ids()
    sweep.passes()  # last: a request that passes may legitimately change rows
    assert not sweep.problems, f"{route.id}:\n  " + "\n  ".join(sweep.problems)


def test_a_nul_in_any_form_field_is_not_a_server_error(app, two_worlds, login_as):
    """PostgreSQL text cannot hold NUL; a form must refuse it, not answer 500.

    Every form on every page the owner can see is posted once per field, with a NUL in
    that field and plausible values in the others.
    """
    a, _ = two_worlds
    rows = routes.Rows(a)
    found: dict[tuple[str, bool], dict[str, str]] = {}
    for route in ALL_ROUTES:
        if route.is_api or route.method != "GET":
            continue
        path = routes.build_path(app, route, rows.values(route))
        for signed_in in (True, False) if route.public else (True,):
            client = login_as(a.owner, a.tenant) if signed_in else app.test_client()
            page = routes.call(app, client, "GET", path)
            if page.mimetype == "text/html":
                for target, values in forms.forms_in(page.get_data(as_text=True), path).items():
                    found.setdefault((target, signed_in), values)
    assert found, "no forms found on any page; the sweep would be vacuous"
    problems = []
    for (target, signed_in), values in sorted(found.items()):
        for name in values:
            data = {**values, name: f"nul\x00{values[name]}"}
            client = login_as(a.owner, a.tenant) if signed_in else app.test_client()
            response = routes.call(app, client, "POST", target, data=data, csrf=True)
            if response.status_code >= 500:
                problems.append(f"POST {target} with a NUL in {name!r}: "
                                f"{response.status_code}")
    assert not problems, "\n".join(problems)


DEEP_JSON = b"[" * 100_000 + b"]" * 100_000
# Bad bodies every JSON route must refuse in the envelope: (body, the refusals allowed).
BAD_JSON = {
    "100k-deep array": (DEEP_JSON, {(400, "bad_request"), (413, "payload_too_large")}),
    "invalid UTF-8": (b'{"name": "\xff\xfe"}', {(400, "bad_request")}),
    "lone surrogate": (b'{"name": "\\udc00"}', {(400, "bad_request")}),
    "over 1 MiB": (b'{"name": "' + b"x" * (1024 * 1024) + b'"}',
                   {(413, "payload_too_large")}),
}
JSON_ROUTES = [r for r in ALL_ROUTES if r.is_api and r.mutating and (
    getattr(routes.view_of(routes.collection_app(), r), "api_doc", None) is not None
    and routes.view_of(routes.collection_app(), r).api_doc.request is not None)]


def test_the_sweep_finds_json_routes():
    assert any(r.endpoint == "api.login" for r in JSON_ROUTES)
    assert len(JSON_ROUTES) >= 10


@pytest.mark.parametrize("route", JSON_ROUTES, ids=routes.route_id)
def test_bad_json_bodies_are_refused_in_the_envelope(route: Route, app, two_worlds, bearer):
    """Every JSON route refuses a body nested 100,000 deep (it used to raise RecursionError:
    a 500), invalid UTF-8, a lone surrogate and an over-long body with 400 `bad_request` or
    413 `payload_too_large`, for a caller its guard lets through, writing nothing. A route
    with a smaller body limit may refuse the deep body as too long first."""
    a, _ = two_worlds
    path = routes.build_path(app, route, routes.Rows(a).values(route))
    if route.guard is None:
        client, headers = app.test_client(), {}
    else:
        minimum = route.guard.role
        api = bearer(a.by_role[minimum] if minimum is not None else a.viewer, a.tenant)
        client, headers = api.client, api.headers
    problems = []
    for label, (data, allowed) in BAD_JSON.items():
        before = routes.fingerprint()
        with app.app_context():
            response = client.open(path, method=route.method, headers=headers, data=data,
                                   content_type="application/json")
            body = response.get_json(silent=True) or {}
        refusal = (response.status_code, (body.get("error") or {}).get("code"))
        if refusal not in allowed or body.get("success") is not False:
            problems.append(f"{label}: {response.status_code} "
                            f"{response.get_data(as_text=True)[:200]!r}")
        if routes.describe_change(before, routes.fingerprint()):
            problems.append(f"{label}: the refused request wrote to the database")
    assert not problems, f"{route.id}:\n  " + "\n  ".join(problems)


# -- the endpoint-swap sweep (issue 9 item 2) -------------------------------------------------

@pytest.fixture(scope="module")
def evil():
    """An attacker's E2B-compatible server on loopback that records every request."""
    from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, require_docker
    from tests.fakes.e2b_server import FakeE2BServer

    require_docker()
    server = FakeE2BServer("e2b", image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           api_key="attacker-key", domain="evil.test",
                           run_id=f"{RUN_ID}swp").start()
    yield server
    server.stop()


def test_every_route_that_takes_a_config_is_in_the_endpoint_swap_sweep(app):
    unlisted = endpoints.unlisted_secret_routes(app, ALL_ROUTES)
    assert not unlisted, ("routes that take a config document; add each to SECRET_ROUTES (or "
                          "SENDS_NOTHING) in tests/sweeps/endpoints.py:\n" + "\n".join(unlisted))


@pytest.mark.parametrize("secret_route", endpoints.SECRET_ROUTES, ids=lambda r: r.endpoint)
def test_a_swapped_address_never_gets_a_stored_secret(secret_route, app, two_worlds, login_as,
                                                      bearer, evil, monkeypatch):
    # Loopback is allowed, so the only reason left to refuse is the secret's binding.
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    a, _ = two_worlds
    route = next(r for r in ALL_ROUTES if r.endpoint == secret_route.endpoint)
    configs = {kind: endpoints.stored_config(a.tenant.id, kind)
               for kind in ("e2b", "cube", "docker")}
    web = login_as(a.admin, a.tenant)  # signed in once: a sign-in is a row of its own
    problems = []
    for swap in endpoints.SWAPS:
        for mask in endpoints.MASKS:
            who = f"{swap.name} with {mask or 'blank'}"
            evil.calls.clear()
            path, body, form = secret_route.request(configs[swap.kind], swap, evil, mask)
            before = routes.fingerprint()
            if body is not None:
                api = bearer(a.admin, a.tenant)
                response = routes.call(app, api.client, route.method, path,
                                       headers=api.headers, json=body)
            else:
                response = routes.call(app, web, route.method, path, data=form, csrf=True)
            page = response.get_data(as_text=True)
            if response.status_code != secret_route.refusal_status \
                    or "re-enter this secret" not in page:
                problems.append(f"{who}: not refused: {response.status_code} {page[:300]!r}")
            if endpoints.SECRET in page:
                problems.append(f"{who}: the secret is in the answer")
            change = routes.describe_change(before, routes.fingerprint())
            if change:
                problems.append(f"{who}: a refused request wrote to the database: {change}")
            if evil.calls:
                problems.append(f"{who}: the swapped address was contacted "
                                f"({len(evil.calls)} requests)")
    assert not problems, f"{route.id}:\n  " + "\n  ".join(problems)


# -- the quota sweep (issue 22: every new limit is swept) ------------------------------------

def _config(tenant):
    from app.services import audit
    from app.services.sandboxes import configs
    from tests.backends.conftest import BASE_IMAGE

    return configs.create_config(tenant, audit.SystemActor("tests"), f"q-{tenant.id}", "", {
        "sandbox_type": "docker", "docker": {"image": BASE_IMAGE, "network_mode": "none"}})


def _upload(config_id: str) -> dict:
    import io

    from tests.fakes import skill_archives

    archive = skill_archives.make_zip({"SKILL.md": skill_archives.skill_md("swept")})
    return {"data": {"file": (io.BytesIO(archive), "skill.zip")},
            "content_type": "multipart/form-data"}


def _session(api, config_id: str) -> str:
    opened = api.post("/api/v1/sessions", json={"sandbox_config_id": config_id})
    assert opened.status_code == 201, opened.json
    return opened.json["data"]["id"]


# (quota, method, a function of (tenant group, api client) giving the path and the request)
QUOTA_ROUTES = {
    "sandbox_configs_per_workspace": ("POST", lambda a, api: ("/api/v1/sandbox-configs", {
        "json": {"name": "over", "config": {"sandbox_type": "docker", "docker": {
            "image": "sandlot/sandbox:base"}}}})),
    "concurrent_installs_per_workspace": ("POST", lambda a, api: (
        f"/api/v1/sandbox-configs/{(c := _config(a.tenant)).id}/skills", _upload(c.id))),
    "concurrent_installs_per_workspace, from the catalog": ("POST", lambda a, api: (
        f"/api/v1/skills/catalog/{routes.make_catalog_skill(a.tenant, 'swept')}/install",
        {"json": {"sandbox_config_ids": [_config(a.tenant).id]}})),
    "concurrent_installs_per_workspace, a reinstall": ("POST", lambda a, api: (
        f"/api/v1/sandbox-configs/{(c := _config(a.tenant)).id}/skills/"
        f"{routes.make_installed_skill(a.tenant, c.id)}/reinstall", {"json": {}})),
    "live_sandboxes_per_member": ("POST", lambda a, api: (
        f"/api/v1/sessions/{_session(api, _config(a.tenant).id)}/exec",
        {"json": {"command": "true"}})),
    "live_sandboxes_per_workspace": ("POST", lambda a, api: (
        f"/api/v1/sessions/{_session(api, _config(a.tenant).id)}/exec",
        {"json": {"command": "true"}})),
}
# Enforced where the work happens, not at a route: an install's commit.
# ...and a warm pool's keeper (tests/api/test_warm_pool.py).
QUOTAS_OF_RUNS = {"skill_image_mb_per_workspace", "warm_sandboxes_per_workspace"}


def test_every_quota_is_swept():
    from app.services import quotas

    swept = {label.split(",")[0] for label in QUOTA_ROUTES} | QUOTAS_OF_RUNS
    assert swept == set(quotas.QUOTAS)


@pytest.mark.parametrize("label", QUOTA_ROUTES)
def test_past_a_quota_a_route_refuses_in_the_envelope_and_writes_nothing(
        label, app, two_worlds, bearer, monkeypatch):
    """The workspace's own override (the operator's `flask quotas set`) at 0: the route
    answers 429 `quota_exceeded` naming the quota, and nothing of the request is kept."""
    from app.extensions import db

    quota = label.split(",")[0]
    a, b = two_worlds
    monkeypatch.setitem(app.extensions, "sandlot_dispatcher", _Idle())
    api = bearer(a.admin, a.tenant)
    method, request = QUOTA_ROUTES[label]
    path, kwargs = request(a, api)
    a.tenant.quotas = {quota: 0}
    db.session.commit()
    before = routes.fingerprint()
    response = api.open(method, path, **kwargs)
    assert response.status_code == 429, response.json
    error = response.json["error"]
    assert error["code"] == "quota_exceeded" and error["data"]["quota"] == quota
    assert error["data"]["limit"] == 0 and "quota of 0" in error["message"]
    assert not routes.describe_change(before, routes.fingerprint())


class _Idle:
    def submit(self, job_id: str, timeout: int, tenant_id: int | None = None) -> None:
        pass  # nothing runs what was accepted before the quota was set
