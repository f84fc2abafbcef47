"""Skills installed on one sandbox config (reference 3.2, 7.6; decisions 8).

Reads go through the stored bundle, never a sandbox. Every run (install, reinstall,
uninstall) is a job under the config's image lock; this module only accepts, re-arms
and enqueues, and `stop` writes the row that the running job watches.
"""

from __future__ import annotations

import uuid
from typing import IO, Any

from sqlalchemy import select

from app.errors import AppError, BadRequest, Conflict, NotFound, Unavailable, ValidationFailed
from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig, Tenant
from app.models.types import utcnow
from app.security.config_secrets import is_lost
from app.security.redaction import MASK
from app.services import Actor, audit, job_limits, jobs, paging, quotas
from app.services.sandboxes import endpoints
from app.services.skills import catalog, store
from app.services.skills import files as skill_files
from app.services.skills.installs import accept, control
from app.storage import blobstore

ENV_VALUE_MAX = 8 * 1024
NOTES_MAX = 10_000
RUN_TIMEOUT = job_limits.LIMITS["install_skill"]  # = the uninstall's
INSTALL_JOB, UNINSTALL_JOB = accept.JOB_KIND, "uninstall_skill"  # app/jobs/skills.py


# -- reading --------------------------------------------------------------------------

def list_installed(config: SandboxConfig) -> list[InstalledSkill]:
    return list(db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.sandbox_config_id == config.id, InstalledSkill.deleted_at.is_(None))
        .order_by(InstalledSkill.name)))


def installed_page(config: SandboxConfig,
                   window: paging.Window) -> paging.Slice[InstalledSkill]:
    """One page of the skills installed on `config`, by name."""
    query = select(InstalledSkill).where(InstalledSkill.sandbox_config_id == config.id,
                                         InstalledSkill.tenant_id == config.tenant_id,
                                         InstalledSkill.deleted_at.is_(None))
    return paging.keyset(query, (InstalledSkill.name, InstalledSkill.id), window)


def runnable_names(config_id: str) -> list[str]:
    """Skills a session of the config can run now: enabled, and ready or still served by
    the image while an upgrade runs or after it failed (what `exec {skill}` accepts)."""
    rows = db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.sandbox_config_id == config_id, InstalledSkill.enabled.is_(True),
        InstalledSkill.deleted_at.is_(None)).order_by(InstalledSkill.name))
    return [row.name for row in rows if row.status == InstallStatus.ready
            or (row.served and row.status != InstallStatus.removing)]


def get_installed(config: SandboxConfig, skill_id: str) -> InstalledSkill:
    """The live row of `config`; another config's or workspace's is a 404."""
    row = db.session.get(InstalledSkill, skill_id) if len(skill_id) <= 36 else None
    if row is None or row.sandbox_config_id != config.id or row.deleted_at is not None \
            or row.tenant_id != config.tenant_id:
        raise NotFound("No such skill is installed on this sandbox config.")
    return row


def view(row: InstalledSkill) -> dict[str, Any]:
    """The reference 3.2 skill object: instructions left out, env values only as is_set."""
    values = row.env_values or {}
    lost = is_lost(row.env_values)  # the key that sealed them is gone: all need re-entry
    return {
        "id": row.id, "name": row.name, "version": row.version, "description": row.description,
        "enabled": row.enabled, "status": str(row.status), "error": row.error,
        "bundle_sha256": row.bundle_sha256, "installed_snapshot_id": row.installed_snapshot_id,
        "install_session_id": row.install_session_id,
        "install_message_id": row.install_message_id, "created_at": row.created_at,
        "updated_at": row.updated_at,
        "served": {"version": row.served.get("version", "")} if row.served else None,
        "envs": [{"name": e["name"], "description": e.get("description", ""),
                  "required": bool(e.get("required")), "is_set": bool(values.get(e["name"])),
                  "needs_reentry": lost}
                 for e in row.envs or []],
    }


def list_files(row: InstalledSkill) -> list[dict[str, Any]]:
    with _bundle(row) as archive:
        return skill_files.list_files(archive)


def read_file(row: InstalledSkill, path: str | None) -> dict[str, Any]:
    clean = skill_files.safe_path(path)
    with _bundle(row) as archive:
        return skill_files.read_file(archive, clean)


class _bundle:
    """The archive the row was built from (the pinned one), as a context manager."""

    def __init__(self, row: InstalledSkill):
        self.row, self.inner = row, None

    def __enter__(self) -> IO[bytes]:
        try:
            self.inner = store.blobs().open(self.row.bundle_ref)
            return self.inner.__enter__()
        except blobstore.BlobMissing:
            raise NotFound("The skill's files are not available.") from None
        except blobstore.BlobStoreError as exc:
            raise Unavailable(f"The skill bundle store is not reachable ({exc}).") from None

    def __exit__(self, *exc) -> None:
        if self.inner is not None:
            self.inner.__exit__(*exc)


# -- installing -----------------------------------------------------------------------

def add_from_upload(tenant: Tenant, actor: Actor, config: SandboxConfig,
                    upload: IO[bytes]) -> str:
    """POST .../skills with a zip: register (upsert) the definition, then install it."""
    endpoints.require_backend(config.config)  # before anything is registered
    quotas.admit_install(tenant)  # likewise (accept checks again, against a race)
    entry = catalog.register_upload(tenant, actor, upload)
    return _install_one(tenant, actor, entry, config)


def add_from_source(tenant: Tenant, actor: Actor, config: SandboxConfig, source: str) -> str:
    endpoints.require_backend(config.config)  # before anything is registered
    quotas.admit_install(tenant)  # likewise (accept checks again, against a race)
    entry = catalog.register_source(tenant, actor, source)
    return _install_one(tenant, actor, entry, config)


def _install_one(tenant: Tenant, actor: Actor, entry, config: SandboxConfig) -> str:
    installs, _ = catalog.install(tenant, actor, entry, [config.id])
    return installs[config.id]


def reinstall(tenant: Tenant, actor: Actor, row: InstalledSkill, notes: str | None) -> str:
    """Reference 7.1 reinstall: retry from the stored archive; notes open the new run's
    transcript (the deterministic installer takes no guidance, decisions 8)."""
    if notes and "\x00" in notes:  # PostgreSQL text cannot hold it
        raise BadRequest("Notes cannot contain a NUL character.")
    busy = row.status in (InstallStatus.installing, InstallStatus.removing)
    if notes and busy:
        raise Conflict("This skill is busy; notes cannot be added to a running install.")
    if row.status == InstallStatus.removing:
        raise Conflict("This skill is being removed.")
    config = db.session.get(SandboxConfig, row.sandbox_config_id)
    endpoints.require_backend(config.config if config is not None else {})
    try:
        kept = bool(row.bundle_ref) and store.blobs().exists(row.bundle_ref)
    except blobstore.BlobStoreError as exc:  # the archive may well be there: try again
        raise Unavailable(f"The skill bundle store is not reachable ({exc}); try the "
                          "reinstall again shortly.") from None
    if not kept:
        raise BadRequest("The skill's stored archive is gone; register the skill again.")
    if row.status == InstallStatus.installing and not control.is_silent(row):
        return row.id  # a fresh run is in flight (reference 7.1 dedupe)
    if row.status != InstallStatus.installing:
        quotas.admit_install(tenant)
    if row.status == InstallStatus.ready:
        row.served = {"version": row.version, "description": row.description,
                      "instructions": row.instructions, "bundle_sha256": row.bundle_sha256,
                      "bundle_ref": row.bundle_ref, "snapshot_id": row.installed_snapshot_id}
    row.status, row.error, row.installing_since = InstallStatus.installing, None, utcnow()
    row.stop_requested_at, row.job_id = None, None
    audit.record(tenant, actor, "installed_skill.reinstalled", "installed_skill", row.id,
                 {"name": row.name, "with_notes": bool(notes)})
    db.session.commit()
    _enqueue(INSTALL_JOB, tenant, actor, row, notes=notes)
    return row.id


def _enqueue(kind: str, tenant: Tenant, actor: Actor, row: InstalledSkill,
             notes: str | None = None):
    """The row names its job before the job can start (see installs.accept.enqueue)."""
    row.job_id = str(uuid.uuid4())
    params = {"skill_id": row.id, **({"notes": notes} if notes else {})}
    try:
        return jobs.enqueue(kind, tenant_id=tenant.id, actor_id=actor.actor_id,
                            target_type="installed_skill", target_id=row.id,
                            params=params, timeout_sec=RUN_TIMEOUT, job_id=row.job_id)
    except AppError as exc:
        fallback = InstallStatus.ready if row.installed_snapshot_id else InstallStatus.failed
        row.status = fallback if kind == UNINSTALL_JOB else InstallStatus.failed
        row.error = exc.message
        db.session.commit()
        raise


# -- changing -------------------------------------------------------------------------

def update(tenant: Tenant, actor: Actor, row: InstalledSkill, enabled: bool | None,
           envs: dict[str, Any] | None) -> InstalledSkill:
    """PATCH: `enabled` and/or admin `envs` values, checked in full before anything is
    written. Only declared names; "" clears; "***" keeps; at most 8 KiB a value."""
    if enabled is None and envs is None:
        # In words people read; the API's field names stay in the details.
        raise BadRequest("Nothing to change: turn the skill on or off, or set its variables.",
                         data={"fields": ["enabled", "envs"]})
    values = _new_values(row, envs) if envs is not None else None
    changed = []
    if enabled is not None and enabled != row.enabled:
        row.enabled = enabled
        changed.append("enabled")
    if values is not None:
        row.env_values = values or None
        changed.append("envs")
    row.updated_at = utcnow()
    audit.record(tenant, actor, "installed_skill.updated", "installed_skill", row.id,
                 {"name": row.name, "changed": changed, "enabled": row.enabled,
                  "env_names": sorted(envs or {})})
    db.session.commit()
    return row


def _new_values(row: InstalledSkill, envs: dict[str, Any]) -> dict[str, str]:
    declared = {e["name"] for e in row.envs or []}
    values = dict(row.env_values or {})
    errors = []
    for name, value in envs.items():
        field = f"envs.{name}" if len(name) <= 128 else "envs"
        if name not in declared:
            errors.append({"field": field, "message": f"skill {row.name} does not declare "
                                                      "this variable"})
        elif not isinstance(value, str):
            errors.append({"field": field, "message": "the value must be a string"})
        elif len(value.encode()) > ENV_VALUE_MAX:
            errors.append({"field": field, "message": "at most 8 KiB"})
        elif value == "":
            values.pop(name, None)
        elif value != MASK:
            values[name] = value
    if errors:
        raise ValidationFailed(errors)
    return values


def stop(tenant: Tenant, actor: Actor, row: InstalledSkill) -> InstalledSkill:
    """Reference 7.6 stop: only while installing; a failed skill is returned unchanged."""
    if row.status == InstallStatus.failed:
        return row
    if row.status != InstallStatus.installing:
        raise BadRequest("This skill is not installing, so there is nothing to stop.")
    if control.stop(row):
        audit.record(tenant, actor, "installed_skill.stopped", "installed_skill", row.id,
                     {"name": row.name})
        db.session.commit()
    db.session.refresh(row)
    return row


def uninstall(tenant: Tenant, actor: Actor, row: InstalledSkill) -> str:
    """Reference 7.6 uninstall: status `removing` and a removal job (202). An install in
    flight is stopped first; a removal already queued is not queued twice."""
    if row.status == InstallStatus.removing and not control.is_silent(row):
        return row.id
    if row.status == InstallStatus.installing:
        control.stop(row)
        db.session.refresh(row)
    row.status, row.error, row.installing_since = InstallStatus.removing, None, utcnow()
    row.stop_requested_at, row.job_id = None, None
    audit.record(tenant, actor, "installed_skill.uninstalled", "installed_skill", row.id,
                 {"name": row.name})
    db.session.commit()
    _enqueue(UNINSTALL_JOB, tenant, actor, row)
    return row.id


# -- guidance (decisions 8: the deterministic installer takes none) -------------------

def guidance(row: InstalledSkill) -> dict[str, Any]:
    return {"accepting": False, "messages": []}


def send_guidance(row: InstalledSkill) -> None:
    raise Conflict("The deterministic installer takes no guidance; change the bundle and "
                   "reinstall instead.")
