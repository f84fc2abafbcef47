"""The skill catalog under /api/v1/skills (reference 3.3, guard table 2.3).

Registering takes JSON `{source}` or a zip: a multipart form with the zip in `file`, or the
zip itself as the body (application/zip or application/octet-stream). Uploads stream into
a size-capped spool in chunks; this route raises the request's body limit to the bundle
limit (plus 1 MiB of multipart slack) for itself only, and a JSON body stays capped at
64 KiB.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from flask import jsonify, request
from pydantic import Field
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.formparser import FormDataParser

from app.api import bp
from app.api._core import (
    Out,
    Strict,
    doc,
    ok,
    parse_body,
    parse_object,
    parse_query,
    project,
    read_json,
    validate,
)
from app.api.paging import PageQuery, ok_page, window
from app.auth.guards import FULL_ACCESS, REFUSED, guard
from app.errors import BadRequest, UnsupportedMediaType, ValidationFailed
from app.models import Role, SkillCatalogEntry
from app.services import paging
from app.services.skills import catalog as service
from app.services.skills.limits import MULTIPART_SLACK, BoundedSpool, BundleTooLarge
from app.tenancy import current_tenant, get_or_404, principal

MiB = 1024 * 1024
JSON_LIMIT = 64 * 1024
ZIP_TYPES = {"application/zip", "application/x-zip-compressed", "application/octet-stream"}


class SourceIn(Strict):
    source: str = Field(max_length=2048, description=(
        "@owner/slug[@version], slug, skills-sh:owner/repo/slug, or a GitHub, GitLab, "
        "skills.sh, ClawHub, SkillHub, registry or direct archive URL"))


DISPLAY_NAME = Field(description="The name as the SKILL.md writes it (any script); `name` "
                                 "is the identifier derived from it or given as `slug`")
NOTES = Field(description="What the owner should know about the bundle: frontmatter that "
                          "was repaired, file names that mix lookalike scripts")


class RegisteredOut(Out):
    id: str
    name: str
    version: str
    description: str
    display_name: str = DISPLAY_NAME
    notes: list[str] = NOTES


class ServedOut(Out):
    version: str


class InstallationOut(Out):
    skill_id: str
    sandbox_config_id: str
    sandbox_config_name: str
    sandbox_type: str
    status: str
    enabled: bool
    error: str | None
    bundle_sha256: str
    version: str
    served: ServedOut | None = None
    updated_at: datetime


class CatalogEntryOut(Out):
    id: str
    name: str
    version: str
    description: str
    display_name: str = DISPLAY_NAME
    notes: list[str] = NOTES
    bundle_sha256: str
    categories: list[str]
    created_at: datetime
    updated_at: datetime
    installations: list[InstallationOut]


class AvailableSkillOut(Out):
    name: str
    version: str
    description: str
    categories: list[str]
    catalog_id: str | None
    sandbox_config_ids: list[str]


class SkillFileOut(Out):
    path: str
    size: int


class FileQuery(Strict):
    path: str = Field(default="SKILL.md", max_length=1024,
                      description="A path relative to the skill's root; SKILL.md by default")


class FileContentOut(Out):
    path: str
    size: int
    encoding: str = Field(description="utf-8, base64 (images up to 2 MiB) or binary")
    content: str
    media_type: str
    truncated: bool
    binary: bool


class CategoriesIn(Strict):
    categories: list[str] = Field(max_length=64)


class InstallIn(Strict):
    sandbox_config_ids: list[str] = Field(max_length=100)


class InstallResultOut(Out):
    installs: dict[str, str] = Field(description="sandbox config id -> installed skill id")
    errors: dict[str, str] | None = Field(default=None,
                                          description="sandbox config id -> why it failed")


def _entry(catalog_id) -> SkillCatalogEntry:
    return get_or_404(SkillCatalogEntry, str(catalog_id), "skill")


@bp.get("/skills/catalog")
@guard(Role.viewer, api_key=REFUSED)
@doc("The workspace's skill definitions with their installations, by name",
     query=PageQuery, response=CatalogEntryOut, many=True, errors=(400,))
def list_catalog():
    query = parse_query(PageQuery)
    views = service.list_catalog(current_tenant())
    return ok_page(paging.in_memory(views, _by_name, window(query)),
                   lambda view: project(CatalogEntryOut, view))


def _by_name(item: dict) -> tuple:
    return (str(item["name"]),)


class AvailableQuery(PageQuery):
    sandbox_config_id: str | None = Field(
        default=None, max_length=64,
        description="Only that config's skills, each as {name, description}")


@bp.get("/skills")
@guard(Role.viewer, api_key=REFUSED)
@doc("Skills agents can use now (enabled and built on a sandbox config); with "
     "sandbox_config_id, that config's as {name, description}; `skills_available` says "
     "whether there are any", query=AvailableQuery, response=AvailableSkillOut, many=True,
     errors=(400, 404))
def list_available_skills():
    query = parse_query(AvailableQuery)
    if query.sandbox_config_id:
        skills = service.list_available_on(current_tenant(), query.sandbox_config_id)
        return ok_page(paging.in_memory(skills, _by_name, window(query)), dict,
                       skills_available=bool(skills))
    rows = service.list_available(current_tenant())
    return ok_page(paging.in_memory(rows, _by_name, window(query)),
                   lambda s: project(AvailableSkillOut, s), skills_available=bool(rows))


@bp.post("/skills/catalog")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Register a skill from a source or a zip upload (upsert by name)", request=SourceIn,
     upload="file", response=RegisteredOut, status=201, errors=(400, 413, 415, 503))
def register_skill():
    tenant, who = current_tenant(), principal()
    if request.mimetype.startswith("application/json"):
        row = service.register_source(tenant, who, parse_body(SourceIn, JSON_LIMIT).source)
    elif request.mimetype == "multipart/form-data" or request.mimetype in ZIP_TYPES:
        with upload_spool() as spool:
            row = service.register_upload(tenant, who, spool)
    else:
        raise UnsupportedMediaType("Send JSON {\"source\": ...}, a multipart form with the zip "
                                   "in 'file', or the zip itself as application/zip.")
    return ok(project(RegisteredOut, row), 201)


@contextmanager
def upload_spool() -> Iterator[BoundedSpool]:
    """The uploaded zip in a spool that refused to grow past the bundle limit."""
    limit_mb = service.limit_mb()
    request.max_content_length = limit_mb * MiB + MULTIPART_SLACK
    spools: list[BoundedSpool] = []

    def new_spool(*_args, **_kwargs) -> BoundedSpool:
        spools.append(BoundedSpool(limit_mb * MiB, limit_mb))
        return spools[-1]

    try:
        stream = request.stream
        if request.mimetype == "multipart/form-data":
            upload = _multipart_file(stream, new_spool)
        else:
            upload = new_spool().fill(stream)
        yield upload
    except RequestEntityTooLarge:
        raise BundleTooLarge(limit_mb) from None
    finally:
        for spool in spools:
            spool.close()


def _multipart_file(stream, new_spool) -> BoundedSpool:
    # The decoder buffers up to max_form_memory_size while it looks for a boundary.
    parser = FormDataParser(stream_factory=new_spool, max_form_memory_size=MiB,
                            max_form_parts=16, silent=False)
    try:
        _, _, files = parser.parse(stream, "multipart/form-data", request.content_length,
                                   request.mimetype_params)
    except ValueError:
        raise BadRequest("The multipart body could not be read.") from None
    upload = files.get("file")
    if upload is None:
        raise ValidationFailed.one("file", "file is required")
    upload.stream.seek(0)
    return upload.stream


@bp.get("/skills/catalog/<uuid:catalog_id>/files")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("The files of a skill's stored bundle, by path", query=PageQuery, response=SkillFileOut,
     many=True, errors=(400, 404))
def list_skill_files(catalog_id):
    query = parse_query(PageQuery)
    files = service.list_files(_entry(catalog_id))
    return ok_page(paging.in_memory(files, lambda f: (str(f.get("path", "")),), window(query)),
                   lambda f: project(SkillFileOut, f))


@bp.get("/skills/catalog/<uuid:catalog_id>/files/content")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("One file of a skill's stored bundle: text up to 1 MiB, images as base64",
     query=FileQuery, response=FileContentOut, errors=(400, 404))
def read_skill_file(catalog_id):
    query = parse_query(FileQuery)
    return ok(project(FileContentOut, service.read_file(_entry(catalog_id), query.path)))


@bp.put("/skills/catalog/<uuid:catalog_id>/categories")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Set a skill's category tags (a bare JSON list is accepted too)", request=CategoriesIn,
     response=CatalogEntryOut, errors=(400, 404, 415))
def set_skill_categories(catalog_id):
    payload = read_json()
    body = (validate(CategoriesIn, {"categories": payload}) if isinstance(payload, list)
            else parse_object(CategoriesIn, payload))
    entry = _entry(catalog_id)
    service.set_categories(current_tenant(), principal(), entry, body.categories)
    view = next(v for v in service.list_catalog(current_tenant()) if v["id"] == entry.id)
    return ok(project(CatalogEntryOut, view))


@bp.delete("/skills/catalog/<uuid:catalog_id>")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Delete a skill definition (409 while it is installed anywhere)", errors=(404, 409))
def delete_skill(catalog_id):
    service.delete_entry(current_tenant(), principal(), _entry(catalog_id))
    return ok(None)


@bp.post("/skills/catalog/<uuid:catalog_id>/install")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Install a skill onto sandbox configs; 202 with per-config results, or the first "
     "error when every target fails", request=InstallIn, response=InstallResultOut,
     status=202, partial=True, errors=(400, 403, 404, 409, 423, 429, 503))
def install_skill(catalog_id):
    body = parse_body(InstallIn)
    entry = _entry(catalog_id)
    installs, errors = service.install(current_tenant(), principal(), entry,
                                       body.sandbox_config_ids)
    data = {"installs": installs, **({"errors": errors} if errors else {})}
    return jsonify({"success": not errors, "data": data}), 202
