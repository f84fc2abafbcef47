"""Personal variables under /api/v1/me/env-vars (reference 3.4 and 8, decisions 9).

Identity is the signed-in member only: the bodies have no principal field and API keys
are refused, so no request can name, read, overwrite or delete another member's value.
Unlike every other route, fields the route does not use are ignored rather than refused:
the reference's clients send a principal or the other scope's id beside the body, and
those must be neither obeyed nor an error (reference 8.1). Values are never returned.
"""

from __future__ import annotations

from datetime import datetime

from flask import g
from pydantic import ConfigDict, Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query
from app.api.paging import PageQuery, ok_page, window
from app.auth.guards import REFUSED, guard
from app.errors import BadRequest
from app.services import paging
from app.services.personal import values as service
from app.tenancy import current_tenant

NAME_FIELD = Field(default=None, max_length=256, description=service.NAME_HINT)
VALUE_FIELD = Field(default=None, max_length=service.VALUE_MAX_BYTES,
                    description="Write only; never returned. Ignored by DELETE.")


class Ignoring(Strict):
    """A body whose unknown fields are dropped unread (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)


class SkillVarIn(Ignoring):
    skill_id: str | None = Field(default=None, max_length=64)
    name: str | None = NAME_FIELD
    value: str | None = VALUE_FIELD


class SandboxVarIn(Ignoring):
    sandbox_config_id: str | None = Field(default=None, max_length=64)
    name: str | None = NAME_FIELD
    value: str | None = VALUE_FIELD


class EnvVarView(Out):
    name: str
    description: str | None = None
    required: bool | None = None
    source: str = Field(description="unset, workspace or user")
    needs_reentry: bool = Field(description="Your stored value no longer decrypts; set it again")
    updated_at: datetime | None = Field(default=None, description="Only for your own value")


class SkillEnvGroup(Out):
    skill_id: str
    skill_name: str
    description: str | None = None
    vars: list[EnvVarView]


class ConfigEnvGroup(Out):
    sandbox_config_id: str
    sandbox_config_name: str
    description: str | None = None
    vars: list[EnvVarView]
    skills: list[SkillEnvGroup]


def _who() -> service.Who:
    return service.Who.user(current_tenant(), g.principal.user)


def _skill_body() -> tuple[str, str, str | None]:
    body = parse_body(SkillVarIn)
    if not body.skill_id or not body.name:
        raise BadRequest("skill_id and name are required")
    return body.skill_id, body.name, body.value


def _sandbox_body() -> tuple[str, str, str | None]:
    body = parse_body(SandboxVarIn)
    if not body.sandbox_config_id or not body.name:
        raise BadRequest("sandbox_config_id and name are required")
    return body.sandbox_config_id, body.name, body.value


@bp.get("/me/env-vars")
@guard(None, api_key=REFUSED)
@doc("Your personal variables: every sandbox config, its skills' declared variables and "
     "your config-wide variables (values are never returned)", response=ConfigEnvGroup,
     query=PageQuery, many=True, errors=(400,))
def list_my_env_vars():
    query = parse_query(PageQuery)
    groups = service.list_groups(_who())
    page = paging.in_memory(groups, _by_config, window(query))
    return ok_page(page, lambda x: ConfigEnvGroup.model_validate(x).model_dump(mode="json"))


def _by_config(group: dict) -> tuple:
    return (str(group["sandbox_config_name"]), str(group["sandbox_config_id"]))


@bp.put("/me/env-vars/skill")
@guard(None, api_key=REFUSED)
@doc("Set your own value for a variable a skill declares", request=SkillVarIn,
     errors=(400,))
def put_my_skill_env_var():
    skill_id, name, value = _skill_body()
    service.set_skill_value(_who(), skill_id, name, value)
    return ok(None)


@bp.delete("/me/env-vars/skill")
@guard(None, api_key=REFUSED)
@doc("Clear your own value for a skill's variable", request=SkillVarIn, errors=(400, 404))
def delete_my_skill_env_var():
    skill_id, name, _ = _skill_body()
    service.delete_skill_value(_who(), skill_id, name)
    return ok(None)


@bp.put("/me/env-vars/sandbox")
@guard(None, api_key=REFUSED)
@doc("Set your own config-wide variable on a sandbox config", request=SandboxVarIn,
     errors=(400,))
def put_my_sandbox_env_var():
    config_id, name, value = _sandbox_body()
    service.set_config_value(_who(), config_id, name, value)
    return ok(None)


@bp.delete("/me/env-vars/sandbox")
@guard(None, api_key=REFUSED)
@doc("Clear your own config-wide variable", request=SandboxVarIn, errors=(400, 404))
def delete_my_sandbox_env_var():
    config_id, name, _ = _sandbox_body()
    service.delete_config_value(_who(), config_id, name)
    return ok(None)
