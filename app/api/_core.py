"""Request parsing, the success envelope, and per-route API documentation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import current_app, jsonify, request
from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticError

from app.errors import BadRequest, UnsupportedMediaType, ValidationFailed, field_path
from app.security import json_input
from app.services.field_labels import labelled

T = TypeVar("T", bound=BaseModel)


class Strict(BaseModel):
    """Base of every request schema: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Out(BaseModel):
    """Base of every response schema: built from an explicit projection of a row."""

    model_config = ConfigDict(from_attributes=True)


@dataclass(frozen=True)
class Doc:
    summary: str
    request: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    many: bool = False
    status: int = 200
    errors: tuple[int, ...] = ()
    envelope: bool = True  # False: the body is a bare JSON object (the OpenAPI document)
    stream: bool = False  # True: the success body is text/event-stream (reference 7.3, 7.5)
    binary: bool = False  # True: the success body is the bytes of a file (a download)
    upload: str | None = None  # also takes multipart/form-data with a file in this field
    partial: bool = False  # `success` is false when some targets failed (a 202 fan-out)


def doc(summary: str, **kwargs: Any) -> Callable:
    """Attach the OpenAPI description that `api.openapi` turns into the document."""

    def decorate(view: Callable) -> Callable:
        view.api_doc = Doc(summary, **kwargs)
        return view

    return decorate


def read_json(limit: int | None = None) -> Any:
    """The JSON body, parsed with bounds (depth, UTF-8), or the matching envelope error.

    An over-long body (MAX_CONTENT_LENGTH, or `limit` bytes when given) is refused before
    it is read or judged: 413, whatever else is wrong with it (decisions 13)."""
    if limit is not None:
        request.max_content_length = limit
    if not request.is_json:
        raise UnsupportedMediaType("Send a JSON body with Content-Type: application/json.")
    try:
        return json_input.loads_bounded(request.get_data(cache=True),
                                        current_app.config["JSON_MAX_DEPTH"])
    except json_input.BadJSON as err:
        raise BadRequest(err.message) from None


def parse_body(schema: type[T], limit: int | None = None) -> T:
    """The JSON body validated against `schema`, or the matching envelope error."""
    return parse_object(schema, read_json(limit))


def parse_object(schema: type[T], payload: Any) -> T:
    """An already parsed body that must be a JSON object, validated against `schema`."""
    if not isinstance(payload, dict):
        raise ValidationFailed.one("body", "The body must be a JSON object.")
    return validate(schema, payload)


def parse_query(schema: type[T]) -> T:
    return validate(schema, request.args.to_dict())


def validate(schema: type[T], payload: dict[str, Any]) -> T:
    nul = list(_nul_paths(payload))
    if nul:  # PostgreSQL text cannot hold NUL: refuse it here, not as a 500 from the driver
        raise ValidationFailed(labelled([{"field": field_path(loc), "message":
                                          "must not contain a NUL character"} for loc in nul]))
    try:
        return schema.model_validate(payload)
    except PydanticError as exc:
        # The sentence names the field as a person would; `field` keeps the path.
        raise ValidationFailed(labelled(ValidationFailed.from_pydantic(exc).errors)) from None


def _nul_paths(value: Any, loc: tuple[Any, ...] = ()):
    if isinstance(value, str):
        if "\x00" in value:
            yield loc
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in str(key):
                yield (*loc, key)
            else:
                yield from _nul_paths(item, (*loc, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nul_paths(item, (*loc, index))


def ok(data: Any = None, status: int = 200, **siblings: Any):
    body = {"success": True, "data": data, **siblings}
    return jsonify(body), status


def project(schema: type[BaseModel], row: Any) -> dict[str, Any]:
    return schema.model_validate(row).model_dump(mode="json")
