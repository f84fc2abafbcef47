"""Cursor pagination of the API's lists (issue 15 item 7): `data` stays the array, with
`next_cursor` and `total` beside it; the cursor is opaque, signed, bound to one list of
one workspace, and stable while rows are inserted."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from itsdangerous import URLSafeSerializer

from app.extensions import db
from app.models import SandboxConfig
from app.security import cursors
from tests import factories
from tests.sweeps import routes, world

BASE = "/api/v1/sandbox-configs"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def add_configs(tenant, count: int, *, start: int = 0, at: datetime = T0) -> list[str]:
    ids = []
    for i in range(start, start + count):
        row = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant.id, name=f"cfg-{i:04d}",
                            description="", sandbox_type="docker",
                            config={"sandbox_type": "docker", "docker": {"image": "x"},
                                    "env_vars": {"TOKEN": f"paging-secret-{i}"}},
                            created_at=at + timedelta(seconds=i // 3))  # ties on purpose
        db.session.add(row)
        ids.append((row.created_at, row.id))
    db.session.commit()
    return [row_id for _, row_id in sorted(ids)]  # the list's order: (created_at, id)


@pytest.fixture
def tenants(two_tenants):
    return two_tenants


@pytest.fixture
def admin_a(tenants, bearer):
    return bearer(tenants[0].admin, tenants[0].tenant)


@pytest.fixture
def admin_b(tenants, bearer):
    return bearer(tenants[1].admin, tenants[1].tenant)


def walk(api, url: str, limit: int) -> tuple[list[str], list[dict]]:
    seen, bodies, cursor = [], [], None
    while True:
        query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        response = api.get(url + query)
        assert response.status_code == 200, response.json
        bodies.append(response.json)
        seen += [item["id"] for item in response.json["data"]]
        cursor = response.json["next_cursor"]
        if cursor is None:
            return seen, bodies


def test_default_page_is_100_with_cursor_and_total(tenants, admin_a):
    add_configs(tenants[0].tenant, 130)
    body = admin_a.get(BASE).json
    assert isinstance(body["data"], list) and len(body["data"]) == 100
    assert body["total"] == 130 and isinstance(body["next_cursor"], str)
    assert "workspace_scripts_disabled" in body  # siblings the list had stay
    assert all(item["config"]["env_vars"]["TOKEN"] == "***" for item in body["data"])


def test_walking_the_pages_yields_every_row_once_in_order(tenants, admin_a):
    ids = add_configs(tenants[0].tenant, 61)
    seen, bodies = walk(admin_a, BASE, 25)
    assert seen == ids  # oldest first, ties (three rows a second) broken by id
    assert len(bodies) == 3 and bodies[-1]["next_cursor"] is None


def test_limit_bounds_are_clear_400s(admin_a):
    for bad in ("0", "501", "x", "-1"):
        response = admin_a.get(f"{BASE}?limit={bad}")
        assert response.status_code == 400, bad
        assert response.json["success"] is False
        assert response.json["error"]["code"] == "validation_failed"
    assert admin_a.get(f"{BASE}?limit=500").status_code == 200


def test_pages_are_stable_while_rows_are_inserted(tenants, admin_a):
    ids = add_configs(tenants[0].tenant, 30)
    first = admin_a.get(f"{BASE}?limit=10").json
    # Rows land while the client pages: older-looking and newer ones alike.
    add_configs(tenants[0].tenant, 5, start=100, at=T0 + timedelta(days=1))
    rest, _ = walk_from(admin_a, first["next_cursor"], 10)
    got = [item["id"] for item in first["data"]] + rest
    original = [i for i in got if i in set(ids)]
    assert original == ids  # none skipped, none twice
    assert len(got) == len(set(got))


def walk_from(api, cursor: str, limit: int) -> tuple[list[str], None]:
    seen = []
    while cursor:
        body = api.get(f"{BASE}?limit={limit}&cursor={cursor}").json
        seen += [item["id"] for item in body["data"]]
        cursor = body["next_cursor"]
    return seen, None


def test_garbled_and_forged_cursors_are_400(tenants, admin_a, app):
    add_configs(tenants[0].tenant, 5)
    cursor = admin_a.get(f"{BASE}?limit=2").json["next_cursor"]
    garbled = cursor[:-3] + ("aaa" if not cursor.endswith("aaa") else "bbb")
    forged = URLSafeSerializer("not-the-secret", salt=cursors.SALT).dumps(
        {"s": "anything", "k": [{"dt": "2000-01-01T00:00:00+00:00"}, ""]})
    for bad in (garbled, forged, "not-a-cursor", "e30"):
        response = admin_a.get(f"{BASE}?cursor={bad}")
        assert response.status_code == 400, bad
        assert response.json["error"]["code"] == "validation_failed"
        assert response.json["error"]["data"]["errors"][0]["field"] == "cursor"


def test_a_cursor_never_opens_another_workspace_or_list(tenants, admin_a, admin_b):
    add_configs(tenants[0].tenant, 5)
    add_configs(tenants[1].tenant, 5, start=50)
    cursor = admin_a.get(f"{BASE}?limit=2").json["next_cursor"]
    response = admin_b.get(f"{BASE}?cursor={cursor}")
    assert response.status_code == 400
    assert "cfg-" not in response.get_data(as_text=True)
    # Another list of the same workspace refuses it too.
    assert admin_a.get(f"/api/v1/members?cursor={cursor}").status_code == 400


# -- every list of the API pages the same way (a sweep over url_map) -------------------

def list_routes(app) -> list[routes.Route]:
    return [r for r in routes.iter_routes(app) if r.is_api and r.method == "GET"
            and getattr(routes.view_of(app, r).api_doc if hasattr(routes.view_of(app, r),
                                                                  "api_doc") else None,
                        "many", False)]


def identity(item) -> str:
    return str(item.get("id") or item.get("name") or item.get("path")
               or item.get("sandbox_config_id") or item)


def test_the_sweep_finds_every_list(app):
    found = {r.rule for r in list_routes(app)}
    assert {"/api/v1/sandbox-configs", "/api/v1/members", "/api/v1/api-keys",
            "/api/v1/invitations", "/api/v1/sessions", "/api/v1/workspace/sessions",
            "/api/v1/sessions/<uuid:session_id>/runs", "/api/v1/skills",
            "/api/v1/skills/catalog", "/api/v1/me/env-vars"} <= found


def test_every_list_pages_with_a_cursor_it_alone_accepts(app, bearer):
    a, _ = world.two_tenants()
    rows = routes.Rows(a)
    for _ in range(2):  # at least two rows in most lists, so the walk crosses a page
        routes.make_sandbox_config(a.tenant)
        routes.make_catalog_skill(a.tenant)
        factories.make_key(a.tenant)
        factories.make_invitation(a.tenant, f"{uuid.uuid4().hex[:8]}@paging.test")
    session_id = rows.values(routes.Route("x", "x", "GET", ("session_id",), None, False))[
        "session_id"]
    routes.make_run(session_id)
    routes.make_run(session_id)
    db.session.commit()
    api = bearer(a.owner, a.tenant)
    walked = 0
    for route in list_routes(app):
        path = routes.build_path(app, route, rows.values(route))
        full = api.get(f"{path}?limit=500")
        assert full.status_code == 200, (route.id, full.json)
        body = full.json
        assert isinstance(body["data"], list) and body["next_cursor"] is None, route.id
        assert body["total"] == len(body["data"]), route.id
        assert api.get(f"{path}?limit=501").status_code == 400, route.id
        assert api.get(f"{path}?cursor=garbled").status_code == 400, route.id
        if len(body["data"]) < 2:
            continue
        walked += 1
        seen, cursor = [], None
        while True:
            page = api.get(f"{path}?limit=1" + (f"&cursor={cursor}" if cursor else "")).json
            seen += [identity(item) for item in page["data"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            # The cursor is this list's alone: the configs list refuses it.
            if route.rule != BASE:
                assert api.get(f"{BASE}?cursor={cursor}").status_code == 400, route.id
        assert seen == [identity(item) for item in body["data"]], route.id
    assert walked >= 8
