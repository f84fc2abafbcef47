"""API keys: created by people (never by another key), shown once, revocable."""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.auth.guards import guard
from app.auth.pepper import api_key_pepper
from app.models import ApiKey, Role
from app.services.identity import api_keys
from app.tenancy import current_tenant, get_or_404, principal


class ApiKeyOut(Out):
    id: int
    name: str
    prefix: str
    full_access: bool
    capabilities: list[str]
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime


class ApiKeyIn(Strict):
    name: str = Field(min_length=1, max_length=100)
    full_access: bool = False
    capabilities: list[str] = Field(default_factory=list, max_length=20)
    expires_at: AwareDatetime | None = None


class CreatedKeyOut(Out):
    key: str = Field(description="The plaintext key. It is shown this once and never again.")
    api_key: ApiKeyOut


@bp.get("/api-keys")
@guard(Role.admin)
@doc("List the workspace's API keys, newest first (prefix only; never the key)",
     query=PageQuery, response=ApiKeyOut, many=True, errors=(400,))
def list_api_keys():
    page = api_keys.keys_page(current_tenant(), window(parse_query(PageQuery)))
    return ok_page(page, lambda key: project(ApiKeyOut, key))


@bp.post("/api-keys")
@guard(Role.admin)
@doc("Create an API key; the response holds the plaintext once", request=ApiKeyIn,
     response=CreatedKeyOut, status=201, errors=(400, 403))
def create_api_key():
    body = parse_body(ApiKeyIn)
    key, plaintext = api_keys.create_key(
        current_tenant(), principal(), name=body.name, full_access=body.full_access,
        capabilities=body.capabilities, expires_at=body.expires_at, pepper=api_key_pepper(),
    )
    return ok({"key": plaintext, "api_key": project(ApiKeyOut, key)}, 201)


@bp.delete("/api-keys/<int:key_id>")
@guard(Role.admin)
@doc("Revoke an API key", response=ApiKeyOut, errors=(403, 404, 409))
def revoke_api_key(key_id: int):
    key = get_or_404(ApiKey, key_id, "API key")
    return ok(project(ApiKeyOut, api_keys.revoke_key(current_tenant(), principal(), key)))
