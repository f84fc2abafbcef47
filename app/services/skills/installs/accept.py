"""Accepting one install of a catalog entry onto one config (reference 7.1): dedupe, the
upgrade that keeps serving the old build, and the enqueue that names its job first."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select

from app.errors import AppError, Conflict
from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig, SkillCatalogEntry, Tenant
from app.models.types import utcnow
from app.services import Actor, job_limits, jobs, quotas
from app.services.sandboxes import endpoints
from app.services.sandboxes.configs import cordoned
from app.tenancy import owned_or_404

FRESH_INSTALL = timedelta(minutes=3)  # reference 7.1: a younger in-flight install dedupes
JOB_KIND = "install_skill"
INSTALL_JOB_TIMEOUT = job_limits.LIMITS[JOB_KIND]


def accept(tenant: Tenant, entry: SkillCatalogEntry,
            config_id: str) -> tuple[InstalledSkill, bool]:
    config = owned_or_404(SandboxConfig, config_id if len(config_id) <= 36 else None, tenant.id,
                          "No such sandbox config in this workspace.")
    now = utcnow()
    if config.is_cordoned(now):
        raise cordoned()
    endpoints.require_backend(config.config)
    row = db.session.scalar(select(InstalledSkill).where(
        InstalledSkill.sandbox_config_id == config.id, InstalledSkill.name == entry.name,
        InstalledSkill.deleted_at.is_(None)))
    if row is not None:
        if row.status == InstallStatus.ready and row.bundle_sha256 == entry.bundle_sha256 \
                and in_image(config, row):
            return row, False
        if row.status == InstallStatus.installing and row.installing_since is not None \
                and now - row.installing_since < FRESH_INSTALL:
            return row, False
        if row.status == InstallStatus.removing:
            raise Conflict("This skill is being removed from that sandbox; install it again "
                           "once the removal has finished.")
    quotas.admit_install(tenant)  # before this target is touched (earlier ones count)
    if row is not None:
        if row.status == InstallStatus.ready:  # an upgrade: agents keep the old build
            row.served = {"version": row.version, "description": row.description,
                          "instructions": row.instructions,
                          "bundle_sha256": row.bundle_sha256, "bundle_ref": row.bundle_ref,
                          "snapshot_id": row.installed_snapshot_id}
    else:
        row = InstalledSkill(id=str(uuid.uuid4()), tenant_id=tenant.id,
                             sandbox_config_id=config.id, name=entry.name, enabled=True,
                             envs=[])
        db.session.add(row)
    row.catalog_id, row.version = entry.id, entry.version
    row.description, row.instructions = entry.description, entry.instructions
    row.bundle_ref, row.bundle_sha256 = entry.bundle_ref, entry.bundle_sha256
    row.status, row.error, row.installing_since, row.job_id = \
        InstallStatus.installing, None, now, None
    row.stop_requested_at = None
    row.updated_at = now
    return row, True


def in_image(config: SandboxConfig, row: InstalledSkill) -> bool:
    """Reference 7.1: a ready row is only skipped if the config's image still has it."""
    image = config.config.get("skill_image") or {}
    return bool(row.installed_snapshot_id and image.get("snapshot_id"))


def enqueue(tenant: Tenant, actor: Actor, row: InstalledSkill) -> None:
    """The row names its job before the job can start: a run checks that it is the one
    the row wants (a superseded run must not touch the row)."""
    row.job_id = str(uuid.uuid4())
    try:
        jobs.enqueue(JOB_KIND, tenant_id=tenant.id, actor_id=actor.actor_id,
                     target_type="installed_skill", target_id=row.id,
                     params={"skill_id": row.id}, timeout_sec=INSTALL_JOB_TIMEOUT,
                     job_id=row.job_id)
    except AppError as exc:
        row.status, row.error = InstallStatus.failed, exc.message
        db.session.commit()
        raise
