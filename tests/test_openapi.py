"""The OpenAPI document covers every API route of url_map, states each guard as security,
is valid OpenAPI 3.1, and the copy committed in docs/openapi.json is current."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import schemathesis
from schemathesis.core.result import Err

from app.auth.guards import REFUSED
from tests.sweeps import routes, world

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "docs" / "openapi.json"
REGENERATE = "SANDLOT_ENV=testing .venv/bin/flask --app wsgi openapi dump docs/openapi.json"
BEARER, KEY = {"bearerAuth": []}, {"apiKeyAuth": []}
RULE_PARAM = re.compile(r"<(?:[^:<>]+:)?(\w+)>")


@pytest.fixture
def two_tenants(app):
    """The conftest world, copied back from rows instead of hashing eight passwords again."""
    return world.two_tenants()


@pytest.fixture
def document(app, client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.get_json()


def api_routes(app):
    return [r for r in routes.iter_routes(app) if r.endpoint.startswith("api.")]


def openapi_path(rule: str) -> str:
    return RULE_PARAM.sub(r"{\1}", rule)


def operation(document, route):
    return document["paths"].get(openapi_path(route.rule), {}).get(route.method.lower())


def test_every_api_route_is_documented(app, document):
    missing = [r.id for r in api_routes(app) if operation(document, r) is None]
    assert not missing, f"API routes missing from the OpenAPI document: {missing}"


def test_the_document_holds_only_api_routes(app, document):
    known = {(openapi_path(r.rule), r.method.lower()) for r in api_routes(app)}
    documented = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert documented <= known, f"documented but not routed: {sorted(documented - known)}"


def test_every_operation_has_a_success_schema_and_the_error_envelope(app, document):
    problems = []
    for route in api_routes(app):
        responses = operation(document, route)["responses"]
        success = [code for code in responses if code.startswith("2")]
        if len(success) != 1:
            problems.append(f"{route.id}: success responses {success}")
            continue
        body = responses[success[0]].get("content", {})
        # An event stream (reference 7.3, 7.5) documents text/event-stream instead, and a
        # download the bytes of a file.
        content = (body.get("application/json") or body.get("text/event-stream")
                   or body.get("application/octet-stream") or {})
        if "schema" not in content:
            problems.append(f"{route.id}: no application/json schema for {success[0]}")
        default = responses.get("default", {}).get("content", {}).get("application/json", {})
        if default.get("schema") != {"$ref": "#/components/schemas/ErrorEnvelope"}:
            problems.append(f"{route.id}: errors are not documented as the envelope")
    assert not problems, "\n".join(problems)


def test_security_matches_each_guard(app, document):
    problems = []
    for route in api_routes(app):
        if route.public:
            expected = []
        elif route.guard.api_key == REFUSED:
            expected = [BEARER]
        else:
            expected = [BEARER, KEY]
        actual = operation(document, route).get("security")
        if actual != expected:
            problems.append(f"{route.id}: security {actual}, guard says {expected}")
    assert not problems, "\n".join(problems)


def test_path_parameters_match_the_rule(app, document):
    problems = []
    for route in api_routes(app):
        declared = {p["name"] for p in operation(document, route)["parameters"]
                    if p["in"] == "path"}
        if declared != set(route.arguments):
            problems.append(f"{route.id}: declares {declared}, rule has {route.arguments}")
    assert not problems, "\n".join(problems)


def test_request_bodies_follow_the_views(app, document):
    problems = []
    for route in api_routes(app):
        info = getattr(routes.view_of(app, route), "api_doc", None)
        wants_body = info is not None and (info.request is not None or info.upload is not None)
        if wants_body != ("requestBody" in operation(document, route)):
            problems.append(f"{route.id}: request body documented={not wants_body}")
    assert not problems, "\n".join(problems)


def test_every_reference_resolves(document):
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(document)))
    missing = refs - set(document["components"]["schemas"])
    assert not missing, f"dangling $ref: {sorted(missing)}"


def test_schema_names_do_not_collide(app):
    """Two different models with one class name would silently share one component."""
    seen: dict[str, type] = {}
    clashes = []
    for route in api_routes(app):
        info = getattr(routes.view_of(app, route), "api_doc", None)
        for model in (info.request, info.response, info.query) if info else ():
            if model is None:
                continue
            other = seen.setdefault(model.__name__, model)
            if other is not model:
                clashes.append(f"{model.__name__}: {other.__module__} and {model.__module__}")
    assert not clashes, "\n".join(sorted(set(clashes)))


def test_the_document_is_valid_openapi_3_1(document):
    assert document["openapi"].startswith("3.1")
    schema = schemathesis.openapi.from_dict(document)
    schema.validate()  # against the OpenAPI 3.1 meta-schema
    errors = [str(result.err()) for result in schema.get_all_operations()
              if isinstance(result, Err)]
    assert not errors, "\n".join(errors)
    assert sum(1 for _ in schema.get_all_operations()) == sum(
        len(ops) for ops in document["paths"].values())


def test_docs_openapi_json_is_current(document):
    assert COMMITTED.exists(), f"docs/openapi.json is missing; generate it: {REGENERATE}"
    committed = json.loads(COMMITTED.read_text())
    assert committed == document, (
        f"docs/openapi.json is out of date with the routes; regenerate it: {REGENERATE}")


def test_the_dump_command_writes_the_served_document(app, document, tmp_path):
    target = tmp_path / "openapi.json"
    result = app.test_cli_runner().invoke(args=["openapi", "dump", str(target)])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert json.loads(text) == document
    assert text == json.dumps(document, indent=2, sort_keys=True) + "\n"


def test_parameterless_gets_answer_what_they_document(app, document, two_tenants, bearer):
    """A quick conformance pass (schemathesis does the thorough one)."""
    import jsonschema_rs

    a, _ = two_tenants
    owner = bearer(a.owner, a.tenant)
    problems = []
    for route in api_routes(app):
        if route.method != "GET" or route.arguments:
            continue
        responses = operation(document, route)["responses"]
        code = next(c for c in responses if c.startswith("2"))
        schema = responses[code]["content"]["application/json"]["schema"]
        response = routes.call(app, owner.client, "GET", route.rule, headers=owner.headers)
        if str(response.status_code) != code:
            problems.append(f"{route.id}: status {response.status_code}, documented {code}")
            continue
        validator = jsonschema_rs.validator_for({**schema, "components": document["components"]})
        errors = [e.message for e in validator.iter_errors(response.get_json())]
        if errors:
            problems.append(f"{route.id}: {errors[:3]}")
    assert not problems, "\n".join(problems)
