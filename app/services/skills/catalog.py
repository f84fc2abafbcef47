"""The skill catalog (reference 3.3, 6): register from an upload or a source, list with
installations, browse files, categories, delete, and the install fan-out (6.6, 7.1).

Bundles are validated and re-packed before anything is stored, so a rejected bundle leaves
no row and no blob. Blobs are content-addressed per workspace; a blob is deleted only when
no live catalog row and no installed skill of the workspace names it any more.

An accepted install creates (or re-arms) the installed-skill row in status `installing`,
commits, and enqueues job kind `install_skill` (services/skills/installs/accept.py); the run
itself is services/skills/installs/pipeline.py.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from flask import current_app
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.errors import (
    AppError,
    Conflict,
    Forbidden,
    NotFound,
    Unavailable,
    ValidationFailed,
)
from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig, SkillCatalogEntry, Tenant
from app.models.types import utcnow
from app.security.safe_http import SafeHTTPClient
from app.services import Actor, audit
from app.services.skills import display as skill_display
from app.services.skills import fetching, sources, store
from app.services.skills import files as skill_files
from app.services.skills.bundles import Bundle, invalid, normalize, sniff
from app.services.skills.installs import accept
from app.services.skills.limits import max_bundle_mb
from app.storage import blobstore

log = logging.getLogger("sandlot.skills")
CATEGORIES_MAX, CATEGORY_MAX = 32, 64


# -- settings -------------------------------------------------------------------------

def limit_mb() -> int:
    return max_bundle_mb(current_app.config)


def source_client() -> SafeHTTPClient:
    config = current_app.config
    return SafeHTTPClient(allow_private=bool(config["SKILL_SOURCES_ALLOW_PRIVATE"]),
                          offline=bool(config.get("SKILL_SOURCES_OFFLINE")),
                          user_agent=config["SKILL_SOURCES_USER_AGENT"],
                          total_timeout=float(config["SKILL_SOURCES_TIMEOUT_SECONDS"]))


# -- registering ----------------------------------------------------------------------

def register_upload(tenant: Tenant, actor: Actor, upload: IO[bytes]) -> SkillCatalogEntry:
    """Reference 3.3 POST /skills/catalog with a zip: validate, store, upsert by name."""
    upload.seek(0)
    kind = sniff(upload.read(512))
    upload.seek(0)
    if kind != "zip":
        raise invalid("upload a .zip archive holding SKILL.md")
    bundle = normalize(upload, kind="zip")
    try:
        return _register(tenant, actor, bundle, "upload")
    finally:
        bundle.close()


def register_source(tenant: Tenant, actor: Actor, source: str,
                    client: SafeHTTPClient | None = None) -> SkillCatalogEntry:
    """Reference 3.3 POST /skills/catalog with {source}: fetch (6.2), validate, upsert."""
    regs = sources.Registries.from_config(current_app.config)
    fetched = fetching.fetch(source, regs, client or source_client(), limit_mb())
    try:
        bundle = normalize(fetched.body, kind=fetched.kind, subdir=fetched.subdir, remote=True)
    finally:
        fetched.close()
    try:
        return _register(tenant, actor, bundle, source.strip())
    finally:
        bundle.close()


def _register(tenant: Tenant, actor: Actor, bundle: Bundle, source: str,
              retried: bool = False) -> SkillCatalogEntry:
    try:
        blob = store.blobs().put(bundle.archive, store.namespace(tenant.id))
    except blobstore.BlobStoreError as exc:
        raise Unavailable(f"The skill bundle store is not reachable ({exc}).") from None
    bundle.archive.seek(0)
    meta = bundle.meta
    row = live_entry_named(tenant, meta.name)
    old_ref = row.bundle_ref if row is not None else None
    if row is None:
        row = SkillCatalogEntry(id=str(uuid.uuid4()), tenant_id=tenant.id, name=meta.name,
                                categories=[])
        db.session.add(row)
    row.version, row.description, row.instructions = meta.version, meta.description, \
        meta.instructions
    row.display_name, row.notes = meta.display_name[:255], list(bundle.notes)
    row.bundle_ref, row.bundle_sha256, row.source = blob.key, blob.sha256, source[:2048]
    row.updated_at = utcnow()
    audit.record(tenant, actor, "skill_catalog.updated" if old_ref else "skill_catalog.created",
                 "skill_catalog", row.id, {"name": meta.name, "version": meta.version,
                                           "bundle_sha256": blob.sha256})
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()  # another registration of this name won: update that one
        if retried:
            raise Conflict(f"A skill named {meta.name!r} is being registered right now.") from None
        return _register(tenant, actor, bundle, source, retried=True)
    if old_ref and old_ref != blob.key:
        store.collect(tenant.id, old_ref)
    return row


def live_entry_named(tenant: Tenant, name: str) -> SkillCatalogEntry | None:
    return db.session.scalar(select(SkillCatalogEntry).where(
        SkillCatalogEntry.tenant_id == tenant.id, SkillCatalogEntry.name == name,
        SkillCatalogEntry.deleted_at.is_(None)))


# -- reading --------------------------------------------------------------------------

def _live_configs(tenant: Tenant) -> dict[str, SandboxConfig]:
    rows = db.session.scalars(select(SandboxConfig).where(
        SandboxConfig.tenant_id == tenant.id, SandboxConfig.deleted_at.is_(None)))
    return {row.id: row for row in rows}


def _installs(tenant: Tenant, configs: dict[str, SandboxConfig]) -> list[InstalledSkill]:
    rows = db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.tenant_id == tenant.id, InstalledSkill.deleted_at.is_(None))
        .order_by(InstalledSkill.created_at, InstalledSkill.id))
    return [row for row in rows if row.sandbox_config_id in configs]


def list_catalog(tenant: Tenant) -> list[dict[str, Any]]:
    """Reference 3.3 GET /skills/catalog: definitions with installations; installs without
    a live definition are shown as synthesised definitions, so nothing installed hides."""
    entries = list(db.session.scalars(select(SkillCatalogEntry).where(
        SkillCatalogEntry.tenant_id == tenant.id, SkillCatalogEntry.deleted_at.is_(None))
        .order_by(SkillCatalogEntry.name)))
    skill_display.fill_missing(entries, store.blobs)  # rows older than display names
    configs = _live_configs(tenant)
    by_catalog: dict[str, list[InstalledSkill]] = defaultdict(list)
    for row in _installs(tenant, configs):
        by_catalog[row.catalog_id or ""].append(row)
    views = {e.name: _entry_view(e, by_catalog.pop(e.id, []), configs) for e in entries}
    for rows in by_catalog.values():  # orphans: no catalog row, or a deleted one
        for row in rows:
            view = views.get(row.name)
            if view is None:
                view = views[row.name] = _synthesised(row)
            view["installations"].append(install_view(row, configs[row.sandbox_config_id]))
    return sorted(views.values(), key=lambda v: v["name"])


def _entry_view(entry: SkillCatalogEntry, rows: list[InstalledSkill],
                configs: dict[str, SandboxConfig]) -> dict[str, Any]:
    return {"id": entry.id, "name": entry.name, "version": entry.version,
            "display_name": entry.display_name or entry.name, "notes": list(entry.notes or []),
            "description": entry.description, "bundle_sha256": entry.bundle_sha256,
            "categories": list(entry.categories or []), "created_at": entry.created_at,
            "updated_at": entry.updated_at,
            "installations": [install_view(row, configs[row.sandbox_config_id]) for row in rows]}


def _synthesised(row: InstalledSkill) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "version": row.version, "description": "",
            "display_name": row.name, "notes": [],
            "bundle_sha256": row.bundle_sha256, "categories": [], "created_at": row.created_at,
            "updated_at": row.updated_at, "installations": []}


def install_view(row: InstalledSkill, config: SandboxConfig) -> dict[str, Any]:
    """One installation as the catalog lists it under its definition."""
    served = {"version": row.served.get("version", "")} if row.served else None
    return {"skill_id": row.id, "sandbox_config_id": row.sandbox_config_id,
            "sandbox_config_name": config.name, "sandbox_type": config.sandbox_type,
            "status": str(row.status), "enabled": row.enabled, "error": row.error,
            "bundle_sha256": row.bundle_sha256, "version": row.version, "served": served,
            "updated_at": row.updated_at}


def list_available(tenant: Tenant) -> list[dict[str, Any]]:
    """Reference 3.3 GET /skills: skills agents can use now, i.e. enabled on a live config
    and either ready or still served from the previous build while an upgrade runs."""
    configs = _live_configs(tenant)
    entries = {e.id: e for e in db.session.scalars(select(SkillCatalogEntry).where(
        SkillCatalogEntry.tenant_id == tenant.id, SkillCatalogEntry.deleted_at.is_(None)))}
    found: dict[str, dict[str, Any]] = {}
    for row in _installs(tenant, configs):
        usable = row.status == InstallStatus.ready or row.served
        if not row.enabled or not usable:
            continue
        entry = entries.get(row.catalog_id or "")
        version = row.version if row.status == InstallStatus.ready else row.served["version"]
        skill = found.setdefault(row.name, {
            "name": row.name, "version": version,
            "description": entry.description if entry else "",
            "categories": list(entry.categories or []) if entry else [],
            "catalog_id": entry.id if entry else None, "sandbox_config_ids": []})
        skill["sandbox_config_ids"].append(row.sandbox_config_id)
    return sorted(found.values(), key=lambda s: s["name"])


def list_available_on(tenant: Tenant, config_id: str) -> list[dict[str, str]]:
    """GET /skills?sandbox_config_id=: the skills agents on that config can run now, as
    {name, description}: enabled, and ready (or still served from the previous build while
    an upgrade runs, exactly what a session exec accepts). A foreign config is a 404."""
    if config_id not in _live_configs(tenant):
        raise NotFound("No such sandbox config in this workspace.")
    rows = db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.tenant_id == tenant.id, InstalledSkill.sandbox_config_id == config_id,
        InstalledSkill.deleted_at.is_(None), InstalledSkill.enabled.is_(True))
        .order_by(InstalledSkill.name, InstalledSkill.id))
    found = []
    for row in rows:
        if row.status == InstallStatus.ready:
            found.append({"name": row.name, "description": row.description})
        elif row.served and row.status != InstallStatus.removing:
            found.append({"name": row.name,
                          "description": row.served.get("description") or row.description})
    return found


def list_files(entry: SkillCatalogEntry) -> list[dict[str, Any]]:
    with _bundle(entry) as archive:
        return skill_files.list_files(archive)


def read_file(entry: SkillCatalogEntry, path: str | None) -> dict[str, Any]:
    clean = skill_files.safe_path(path)  # a bad path is a 400 before any storage read
    with _bundle(entry) as archive:
        return skill_files.read_file(archive, clean)


@contextmanager
def _bundle(entry: SkillCatalogEntry) -> Iterator[IO[bytes]]:
    try:
        with store.blobs().open(entry.bundle_ref) as archive:
            yield archive
    except blobstore.BlobMissing:
        raise NotFound("The skill's files are not available.") from None
    except blobstore.BlobStoreError as exc:
        raise Unavailable(f"The skill bundle store is not reachable ({exc}).") from None


# -- changing -------------------------------------------------------------------------

def set_categories(tenant: Tenant, actor: Actor, entry: SkillCatalogEntry,
                   categories: Any) -> SkillCatalogEntry:
    entry.categories = _categories(categories)
    entry.updated_at = utcnow()
    audit.record(tenant, actor, "skill_catalog.categories", "skill_catalog", entry.id,
                 {"name": entry.name, "categories": entry.categories})
    db.session.commit()
    return entry


def _categories(raw: Any) -> list[str]:
    if not isinstance(raw, list):
        raise ValidationFailed.one("categories", "send a list of category names")
    errors, out = [], []
    for index, item in enumerate(raw):
        name = item.strip() if isinstance(item, str) else None
        if not name or len(name) > CATEGORY_MAX:
            errors.append({"field": f"categories[{index}]",
                           "message": f"a category is 1-{CATEGORY_MAX} characters of text"})
        elif name not in out:
            out.append(name)
    if len(out) > CATEGORIES_MAX:
        errors.append({"field": "categories", "message": f"at most {CATEGORIES_MAX} categories"})
    if errors:
        raise ValidationFailed(errors)
    return out


def delete_entry(tenant: Tenant, actor: Actor, entry: SkillCatalogEntry) -> None:
    """Reference 3.3 DELETE: 409 while any installation remains; else soft-delete the row
    and delete its blob (unless an install still pins it)."""
    configs = _live_configs(tenant)
    remaining = [row for row in _installs(tenant, configs)
                 if row.catalog_id == entry.id or row.name == entry.name]
    if remaining:
        raise Conflict("Remove this skill from every sandbox before deleting it from the "
                       "catalog.", data={"sandbox_config_ids":
                                         sorted({r.sandbox_config_id for r in remaining})})
    entry.deleted_at = utcnow()
    audit.record(tenant, actor, "skill_catalog.deleted", "skill_catalog", entry.id,
                 {"name": entry.name})
    db.session.commit()
    store.collect(tenant.id, entry.bundle_ref)


# -- install fan-out (reference 6.6, 7.1) ---------------------------------------------

def install(tenant: Tenant, actor: Actor, entry: SkillCatalogEntry,
            config_ids: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Accept an install of `entry` onto each config; ({config: skill}, {config: error}).

    Each target is independent. When every target fails, the first error is raised.
    """
    if tenant.scripts_disabled:
        raise Forbidden("Scripts are disabled in this workspace, so skills cannot be "
                        "installed; turn the workspace policy back on first.",
                        code="workspace_scripts_disabled")
    ids = list(dict.fromkeys(i.strip() for i in config_ids if isinstance(i, str) and i.strip()))
    if not ids:
        raise ValidationFailed.one("sandbox_config_ids",
                                   "Choose at least one sandbox config to install the skill on.")
    installs, errors, failures, pending = {}, {}, [], []
    for config_id in ids:
        try:
            row, needs_run = accept.accept(tenant, entry, config_id)
        except AppError as exc:
            errors[config_id] = exc.message
            failures.append(exc)
            continue
        installs[config_id] = row.id
        if needs_run:
            pending.append((config_id, row))
    if installs:
        audit.record(tenant, actor, "skill_catalog.installed", "skill_catalog", entry.id,
                     {"name": entry.name, "installs": installs, "errors": errors})
    db.session.commit()
    for config_id, row in pending:
        try:
            accept.enqueue(tenant, actor, row)
        except AppError as exc:
            installs.pop(config_id)
            errors[config_id] = exc.message
            failures.append(exc)
    if not installs:
        raise failures[0]
    return installs, errors
