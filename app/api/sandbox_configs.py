"""Sandbox configs under /api/v1/sandbox-configs (reference 3.1, guard table 2.3)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import request
from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.api.schemas import JobOut
from app.auth.guards import FULL_ACCESS, guard
from app.models import Role, SandboxConfig
from app.security import config_secrets
from app.services import config_removal
from app.services.sandboxes import configs as service
from app.services.sandboxes import document as sandbox_doc
from app.services.sandboxes import explain, lists
from app.services.sandboxes import templates as sandbox_templates
from app.tenancy import current_tenant, get_or_404, principal


class SandboxConfigOut(Out):
    id: str
    name: str
    description: str
    sandbox_type: str
    config: dict[str, Any] = Field(description="The config document; every set secret is ***")
    secrets_need_reentry: list[str] = Field(
        description="Paths of stored secrets that no longer decrypt (the encryption key "
                    "changed): they read as unset until entered again")
    created_at: datetime
    updated_at: datetime


class SandboxConfigIn(Strict):
    name: str = Field(max_length=200)
    description: str = Field(default="", max_length=4000)
    config: dict[str, Any]


class WorkspacePolicyIn(Strict):
    scripts_disabled: bool


class InventoryOut(Out):
    sandbox_count: int
    session_ids: list[str]
    agent_names: list[str]
    unverifiable: bool


class TemplateOut(Out):
    id: str
    name: str
    status: str = Field(description="ready, building, failed, or untagged (built without "
                                    "the default tag: it will never become ready)")
    version: str = ""
    image: str = ""
    created_at: str | None = None
    updated_at: str | None = None
    standard: bool = False
    desktop: bool = False
    error: str = Field(default="", description="Why the template is not usable, if it is not")
    instance_type: str = ""
    network_type: str = ""
    allow_internet_access: bool | None = None


class TemplatesQueryIn(Strict):
    config: dict[str, Any] | None = None
    config_id: str | None = Field(default=None, max_length=36)
    ensure_standard: bool = False
    replace_standard: bool = False
    ensure_desktop: bool = False
    replace_desktop: bool = False


class TemplatesOut(Out):
    templates: list[TemplateOut]
    standard_template_id: str
    desktop_template_id: str
    provisioned: bool
    job: JobOut | None = Field(default=None, description="The build started (or joined: one "
                               "per workspace and backend identity) by ensure_*/replace_*; "
                               "follow it at GET /jobs/:id, whose result is this object "
                               "once the templates are built")


class ExplainIn(Strict):
    host: str = Field(max_length=260, description="A host name or an IPv4 address")
    port: int | None = Field(default=None, description="1-65535; echoed, no rule names ports")


class ExplainUnsavedIn(ExplainIn):
    config: dict[str, Any] = Field(description="The config as the editor holds it; its "
                                   "network policy is validated as a save would")


class AddressVerdictOut(Out):
    address: str | None = Field(description="The address; null for a special-use one "
                                            "(private, loopback...), whose range is given")
    range: str | None = Field(description="The special-use range the address is in, if any")
    verdict: str
    rule: str
    reason: str


class ExplainOut(Out):
    host: str
    port: int | None
    backend: str
    verdict: str = Field(description="allowed, denied, or unresolved (no rule names the "
                                     "host and it has no address now)")
    rule: str = Field(description="The deciding rule: `allow_out[2] *.example.org`, "
                                  "`deny_out[0] 203.0.113.0/24`, `default deny`, `default allow`, "
                                  "`built-in: <range>`, `cube_rules[1] <name>`, "
                                  "`docker.network_mode none`")
    reason: str
    addresses: list[AddressVerdictOut] = Field(
        description="The IPv4 addresses the name has now, each with its own verdict")
    resolution: str | None = Field(description="Why there are no addresses, if there are none")
    note: str | None = Field(description="Where the provider enforces differently")


def config_out(row: SandboxConfig) -> dict[str, Any]:
    shown = sandbox_doc.masked(row.config)
    return project(SandboxConfigOut, {
        "id": row.id, "name": row.name, "description": row.description,
        "sandbox_type": row.sandbox_type, "config": shown,
        "secrets_need_reentry": config_secrets.lost(shown),
        "created_at": row.created_at, "updated_at": row.updated_at,
    })


def _force() -> bool:
    return request.args.get("force", "").lower() in ("1", "true", "yes")


@bp.get("/sandbox-configs")
@guard(Role.viewer, api_key=FULL_ACCESS)
@doc("List sandbox configs (secrets masked), oldest first, and the workspace script kill "
     "switch", query=PageQuery, response=SandboxConfigOut, many=True, errors=(400,))
def list_sandbox_configs():
    tenant = current_tenant()
    page = lists.configs_page(tenant, window(parse_query(PageQuery)))
    return ok_page(page, config_out, workspace_scripts_disabled=tenant.scripts_disabled)


@bp.put("/sandbox-configs/workspace-policy")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Turn the workspace script kill switch on or off", request=WorkspacePolicyIn)
def put_workspace_policy():
    body = parse_body(WorkspacePolicyIn)
    disabled = service.set_scripts_disabled(current_tenant(), principal(), body.scripts_disabled)
    return ok(None, workspace_scripts_disabled=disabled)


@bp.post("/sandbox-configs/templates/query")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Inspect the template catalog of a stored or unsaved config; ensure_* builds a missing "
     "standard/desktop template, replace_* rebuilds it and switches every config of the "
     "same identity (202 with the build job)", request=TemplatesQueryIn,
     response=TemplatesOut, errors=(400, 404, 409, 503))
def query_templates():
    body = parse_body(TemplatesQueryIn)
    stored = get_or_404(SandboxConfig, body.config_id, "sandbox config") if body.config_id else None
    who = principal()
    result, job = sandbox_templates.query(
        who.tenant_id, who.actor_id, stored, body.config, body.model_dump(),
        may_reuse=service.may_update(who))
    if job is None:
        return ok(project(TemplatesOut, result))
    return ok(project(TemplatesOut, {**result, "job": project(JobOut, job)}), 202)


@bp.post("/sandbox-configs/network/explain")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Would this policy allow a host? The verdict and deciding rule for an unsaved config "
     "(the policy editor's question), with the addresses the name has now",
     request=ExplainUnsavedIn, response=ExplainOut, errors=(400,))
def explain_unsaved_destination():
    body = parse_body(ExplainUnsavedIn)
    return ok(project(ExplainOut, explain.explain_unsaved(body.config, body.host, body.port)))


@bp.post("/sandbox-configs/<uuid:config_id>/network/explain")
@guard(Role.viewer, api_key=FULL_ACCESS)
@doc("Would this config's sandboxes reach a host? The verdict and the deciding rule, with "
     "the addresses the name has now", request=ExplainIn, response=ExplainOut,
     errors=(400, 404))
def explain_destination(config_id):
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    body = parse_body(ExplainIn)
    return ok(project(ExplainOut, explain.explain(row.config, body.host, body.port)))


@bp.post("/sandbox-configs")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Create a sandbox config", request=SandboxConfigIn, response=SandboxConfigOut, status=201,
     errors=(400, 409, 429))
def create_sandbox_config():
    body = parse_body(SandboxConfigIn)
    row = service.create_config(current_tenant(), principal(), body.name, body.description,
                                body.config)
    return ok(config_out(row), 201)


@bp.get("/sandbox-configs/<uuid:config_id>")
@guard(Role.viewer, api_key=FULL_ACCESS)
@doc("One sandbox config (secrets masked)", response=SandboxConfigOut, errors=(404,))
def get_sandbox_config(config_id):
    return ok(config_out(get_or_404(SandboxConfig, str(config_id), "sandbox config")))


@bp.put("/sandbox-configs/<uuid:config_id>")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Update a sandbox config; *** or empty secrets keep the stored value while every "
     "address it is sent to is unchanged (else a field error: send it again); ?force=true "
     "proceeds when the old provider cannot be listed", request=SandboxConfigIn,
     response=SandboxConfigOut, errors=(400, 404, 409, 423))
def update_sandbox_config(config_id):
    body = parse_body(SandboxConfigIn)
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    row = service.update_config(current_tenant(), principal(), row, body.name, body.description,
                                body.config, force=_force())
    return ok(config_out(row))


@bp.delete("/sandbox-configs/<uuid:config_id>")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Delete a sandbox config; ?force=true overrides an unverifiable inventory, never live "
     "sandboxes", errors=(404, 409, 423))
def delete_sandbox_config(config_id):
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    config_removal.delete_config(current_tenant(), principal(), row, force=_force())
    return ok(None)


@bp.get("/sandbox-configs/<uuid:config_id>/sandboxes")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Live sandboxes created from this config", response=InventoryOut, errors=(404,))
def sandbox_inventory(config_id):
    row = get_or_404(SandboxConfig, str(config_id), "sandbox config")
    return ok(service.take_inventory(row).as_dict())
