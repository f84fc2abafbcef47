"""The OpenAPI 3.1 document, generated from url_map, guards and pydantic schemas."""

from __future__ import annotations

import re
from typing import Any

from flask import current_app, jsonify
from pydantic import BaseModel

from app.api import bp
from app.api._core import Doc, doc
from app.api.schemas import ErrorEnvelope
from app.auth.guards import REFUSED, Guard, public

CONVERTERS = {
    "int": {"type": "integer", "minimum": 0},
    "uuid": {"type": "string", "format": "uuid"},
}
RULE_PARAM = re.compile(r"<(?:(\w+):)?(\w+)>")
REF = "#/components/schemas/{model}"


@bp.get("/openapi.json")
@public
@doc("This OpenAPI 3.1 document (a bare object, not the success envelope)", envelope=False)
def openapi_document():
    return jsonify(build_document(current_app))


def build_document(app) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if not rule.endpoint.startswith("api."):
            continue
        view = app.view_functions[rule.endpoint]
        path, params = _path(rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            paths.setdefault(path, {})[method.lower()] = _operation(rule, view, params, schemas)
    schemas["ErrorEnvelope"] = _schema(ErrorEnvelope, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sandlot API", "version": "1"},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
                "apiKeyAuth": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
        },
    }


def _path(rule: str) -> tuple[str, list[dict[str, Any]]]:
    params = [
        {"name": name, "in": "path", "required": True,
         "schema": CONVERTERS.get(conv or "", {"type": "string"})}
        for conv, name in RULE_PARAM.findall(rule)
    ]
    return RULE_PARAM.sub(r"{\2}", rule), params


def _operation(rule, view, params, schemas) -> dict[str, Any]:
    info: Doc = getattr(view, "api_doc", None) or Doc(view.__doc__ or rule.endpoint)
    op: dict[str, Any] = {
        "operationId": rule.endpoint.removeprefix("api."),
        "summary": info.summary,
        "parameters": list(params),
        "responses": {
            str(info.status): {"description": "Success", "content": {
                "application/json": {"schema": _success(info, schemas)}}},
            "default": {"description": "Error envelope", "content": {
                "application/json": {"schema": {"$ref": REF.format(model="ErrorEnvelope")}}}},
        },
    }
    if info.stream:
        op["responses"][str(info.status)] = {"description": "Server-sent events", "content": {
            "text/event-stream": {"schema": {"type": "string"}}}}
    if info.binary:
        op["responses"][str(info.status)] = {"description": "The file's bytes", "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "application/zip": {"schema": {"type": "string", "format": "binary"}}}}
    guard: Guard | None = getattr(view, "guard", None)
    op["security"] = _security(guard, getattr(view, "public", False))
    if guard is not None:
        op["x-guard"] = {"role": guard.role.value if guard.role else None, "api_key": guard.api_key}
    if info.request is not None:
        op["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": _schema(info.request, schemas, "validation")}}}
        if info.upload:
            op["requestBody"]["content"]["multipart/form-data"] = {"schema": {
                "type": "object", "required": [info.upload],
                "properties": {info.upload: {"type": "string", "format": "binary"}}}}
    elif info.upload:  # multipart only: the file field, repeatable, and a folder
        op["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": [info.upload],
            "properties": {info.upload: {"type": "array", "items": {
                "type": "string", "format": "binary"}}, "path": {"type": "string"}}}}}}
    if info.query is not None:
        op["parameters"] += _query_params(info.query)
    return op


def _security(guard: Guard | None, is_public: bool) -> list[dict[str, list]]:
    if is_public or guard is None:
        return []
    schemes = [{"bearerAuth": []}]
    if guard.api_key != REFUSED:
        schemes.append({"apiKeyAuth": []})
    return schemes


def _success(info: Doc, schemas) -> dict[str, Any]:
    if not info.envelope:
        return {"type": "object"}
    data: dict[str, Any] = {"type": "null"}
    if info.response is not None:
        item = _schema(info.response, schemas)
        data = {"type": "array", "items": item} if info.many else item
    body = {
        "type": "object", "required": ["success", "data"],
        "properties": {"success": {"type": "boolean"} if info.partial else {"const": True},
                       "data": data},
    }
    if info.many:  # every list is paged (api.paging)
        body["required"] += ["next_cursor", "total"]
        body["properties"] |= {
            "next_cursor": {"type": ["string", "null"],
                            "description": "Pass as `cursor` for the next page; null on the last"},
            "total": {"type": ["integer", "null"], "description": "Rows in the whole list"}}
    return body


def _schema(model: type[BaseModel], schemas: dict[str, Any], mode: str = "serialization"):
    """Register `model` (and its nested models) in components; return a $ref to it."""
    schema = model.model_json_schema(ref_template=REF, mode=mode)
    for name, sub in schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas.setdefault(model.__name__, schema)
    return {"$ref": REF.format(model=model.__name__)}


def _query_params(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema.get("properties", {}).items()
    ]
