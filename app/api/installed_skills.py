"""Skills installed on a sandbox config, under /api/v1/sandbox-configs/:id/skills
(reference 3.2, guard table 2.3: Admin, API keys with full access)."""

from __future__ import annotations

from datetime import datetime

from flask import jsonify, request
from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.api.skills import (
    JSON_LIMIT,
    ZIP_TYPES,
    FileContentOut,
    FileQuery,
    SkillFileOut,
    SourceIn,
    upload_spool,
)
from app.auth.guards import FULL_ACCESS, guard
from app.errors import UnsupportedMediaType
from app.models import InstalledSkill, Role, SandboxConfig
from app.services import paging
from app.services.skills import installed as service
from app.tenancy import current_tenant, get_or_404, principal

BASE = "/sandbox-configs/<uuid:config_id>/skills"
ONE = f"{BASE}/<uuid:skill_id>"


class ServedVersionOut(Out):
    version: str


class SkillEnvOut(Out):
    name: str
    description: str
    required: bool
    is_set: bool = Field(description="Whether an admin value is stored; never the value")
    needs_reentry: bool = Field(
        default=False, description="The stored admin values no longer decrypt (the encryption "
                                   "key changed): they count as unset until entered again")


class InstalledSkillOut(Out):
    id: str
    name: str
    version: str
    description: str
    enabled: bool
    status: str
    error: str | None
    bundle_sha256: str
    installed_snapshot_id: str | None
    install_session_id: str | None
    install_message_id: str | None
    created_at: datetime
    updated_at: datetime
    served: ServedVersionOut | None
    envs: list[SkillEnvOut]


class SkillIdOut(Out):
    skill_id: str


class SkillPatchIn(Strict):
    enabled: bool | None = None
    envs: dict[str, str] | None = Field(default=None, max_length=20, description=(
        "NAME -> value for declared names; \"\" clears a value"))


class ReinstallIn(Strict):
    instructions: str | None = Field(default=None, max_length=service.NOTES_MAX)


class GuidanceMessageOut(Out):
    id: str
    content: str
    status: str


class GuidanceOut(Out):
    accepting: bool
    messages: list[GuidanceMessageOut]


class GuidanceIn(Strict):
    expected_message_id: str = Field(max_length=64)
    steer_id: str = Field(max_length=64)
    content: str = Field(min_length=1, max_length=10_000)


def _config(config_id) -> SandboxConfig:
    return get_or_404(SandboxConfig, str(config_id), "sandbox config")


def installed_skill(config_id, skill_id) -> InstalledSkill:
    return service.get_installed(_config(config_id), str(skill_id))


def _out(row: InstalledSkill) -> dict:
    return project(InstalledSkillOut, service.view(row))


def _accepted(skill_id: str):
    return jsonify({"success": True, "data": {"skill_id": skill_id}}), 202


@bp.get(BASE)
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Skills installed on a sandbox config, by name", query=PageQuery,
     response=InstalledSkillOut, many=True, errors=(400, 404))
def list_installed_skills(config_id):
    query = parse_query(PageQuery)
    return ok_page(service.installed_page(_config(config_id), window(query)), _out)


@bp.post(BASE)
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Install a skill on this config from a zip upload or a source (also registers it in "
     "the catalog); the install runs as a job", request=SourceIn, upload="file",
     response=SkillIdOut, status=202, errors=(400, 403, 404, 409, 413, 415, 423, 429, 503))
def add_installed_skill(config_id):
    tenant, who, config = current_tenant(), principal(), _config(config_id)
    if request.mimetype.startswith("application/json"):
        source = parse_body(SourceIn, JSON_LIMIT).source
        return _accepted(service.add_from_source(tenant, who, config, source))
    if request.mimetype == "multipart/form-data" or request.mimetype in ZIP_TYPES:
        with upload_spool() as spool:
            return _accepted(service.add_from_upload(tenant, who, config, spool))
    raise UnsupportedMediaType("Send JSON {\"source\": ...}, a multipart form with the zip "
                               "in 'file', or the zip itself as application/zip.")


@bp.get(ONE)
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("One installed skill", response=InstalledSkillOut, errors=(404,))
def get_installed_skill(config_id, skill_id):
    return ok(_out(installed_skill(config_id, skill_id)))


@bp.patch(ONE)
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Enable or disable a skill and set the admin values of its declared variables "
     "(all or nothing)", request=SkillPatchIn, response=InstalledSkillOut,
     errors=(400, 404, 413, 415))
def update_installed_skill(config_id, skill_id):
    body = parse_body(SkillPatchIn, JSON_LIMIT)
    row = installed_skill(config_id, skill_id)
    return ok(_out(service.update(current_tenant(), principal(), row, body.enabled, body.envs)))


@bp.delete(ONE)
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Uninstall a skill (a job: the image is rebuilt without it, or cleared after the "
     "last one)", response=SkillIdOut, status=202, errors=(404, 503))
def uninstall_installed_skill(config_id, skill_id):
    row = installed_skill(config_id, skill_id)
    return _accepted(service.uninstall(current_tenant(), principal(), row))


@bp.post(f"{ONE}/reinstall")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Install the skill again from its stored archive", request=ReinstallIn,
     response=SkillIdOut, status=202, errors=(400, 404, 409, 413, 429, 503))
def reinstall_installed_skill(config_id, skill_id):
    notes = None
    if request.content_length:
        notes = parse_body(ReinstallIn, JSON_LIMIT).instructions
    row = installed_skill(config_id, skill_id)
    return _accepted(service.reinstall(current_tenant(), principal(), row, notes))


@bp.post(f"{ONE}/stop")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Stop a running install (the row becomes failed: install stopped)",
     response=InstalledSkillOut, errors=(400, 404))
def stop_installed_skill(config_id, skill_id):
    row = installed_skill(config_id, skill_id)
    return ok(_out(service.stop(current_tenant(), principal(), row)))


@bp.get(f"{ONE}/files")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("The files of the archive the skill was built from, by path", query=PageQuery,
     response=SkillFileOut, many=True, errors=(400, 404))
def list_installed_skill_files(config_id, skill_id):
    query = parse_query(PageQuery)
    files = service.list_files(installed_skill(config_id, skill_id))
    return ok_page(paging.in_memory(files, _by_path, window(query)),
                   lambda f: project(SkillFileOut, f))


def _by_path(item: dict) -> tuple:
    return (str(item.get("path", "")),)


@bp.get(f"{ONE}/files/content")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("One file of the archive the skill was built from", query=FileQuery,
     response=FileContentOut, errors=(400, 404))
def read_installed_skill_file(config_id, skill_id):
    query = parse_query(FileQuery)
    row = installed_skill(config_id, skill_id)
    return ok(project(FileContentOut, service.read_file(row, query.path)))


@bp.get(f"{ONE}/guidance")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Guidance for a running install (the deterministic installer accepts none)",
     response=GuidanceOut, errors=(404,))
def get_installed_skill_guidance(config_id, skill_id):
    return ok(project(GuidanceOut, service.guidance(installed_skill(config_id, skill_id))))


@bp.post(f"{ONE}/guidance")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Send guidance to a running install: always 409, the installer takes none",
     request=GuidanceIn, errors=(400, 404, 409, 413, 415))
def send_installed_skill_guidance(config_id, skill_id):
    parse_body(GuidanceIn, JSON_LIMIT)
    service.send_guidance(installed_skill(config_id, skill_id))
    return ok(None, 202)
