"""Deleting a sandbox config (reference 3.1.5, decisions 9 and 10): cordon, refuse while
sandboxes are live (force or not), release the config's skill snapshots, soft-delete,
forget its installed skills and members' values scoped to it, and collect the skill
bundles nothing references any more. Forced past an unverifiable inventory, the config's
session records end too, so their sandboxes are removed once the provider answers.

An orchestrator over the sandboxes, sessions, skills and personal domains, so none of
them needs another for it.
"""

from __future__ import annotations

import logging

from sqlalchemy import select, update

from app.backends.base import BackendError
from app.errors import Conflict
from app.extensions import db
from app.models import InstalledSkill, SandboxConfig, Tenant
from app.models.types import utcnow
from app.services import Actor, audit
from app.services.personal import values as personal_env
from app.services.sandboxes import configs
from app.services.sandboxes import image as skill_image
from app.services.sandboxes.provider import backend_for
from app.services.sessions import ending
from app.services.skills import store

log = logging.getLogger("sandlot.sandbox_configs")


def delete_config(tenant: Tenant, actor: Actor, row: SandboxConfig, force: bool = False) -> None:
    """Reference 3.1.5: cordon, refuse while live, soft-delete. Force overrides an
    unverifiable inventory (and a snapshot release that failed), never a live sandbox:
    admins end those sessions first (decisions 10)."""
    stamp = configs.cordon(row)
    try:
        inventory = configs.take_inventory(row)
        if inventory.unverifiable and not force:
            raise configs.unverifiable()
        if inventory.sandbox_count:
            raise configs.still_live(inventory)
        _release_snapshot(row, force)
    except Exception:
        configs.release(row, stamp)
        raise
    if inventory.unverifiable:  # forced: whatever the provider holds goes once it answers
        ending.end_config_sessions(tenant, actor, row)
    db.session.execute(update(SandboxConfig).where(SandboxConfig.id == row.id)
                       .values(deleted_at=utcnow(), cordoned_at=None))
    bundles = _forget_skills(row)
    personal_env.forget_config(row.id)  # members' values scoped to it go too (decisions 9)
    audit.record(tenant, actor, "sandbox_config.deleted", "sandbox_config", row.id,
                 {"name": row.name, "forced": force})
    db.session.commit()
    if bundles:
        for key in set(bundles):
            store.collect(tenant.id, key)


def _release_snapshot(row: SandboxConfig, force: bool) -> None:
    """Decisions 9: every snapshot the ledger knows for this config, and the pointer's own
    (a config from before the ledger), is released; refused (409) if any stays, unless
    forced."""
    snapshot_id = (row.config.get("skill_image") or {}).get("snapshot_id")
    backend = backend_for(row.config)
    try:
        failed = skill_image.release_all(row, backend)
        if snapshot_id and snapshot_id not in failed:
            try:
                backend.delete_snapshot(snapshot_id)
            except BackendError as exc:
                log.warning("snapshot %s of config %s not released: %s", snapshot_id, row.id,
                            exc.reason)
                failed.append(snapshot_id)
    finally:
        backend.close()
    if failed and not force:
        raise Conflict("The skill snapshots of this config could not be released; retry, or "
                       "force the delete.", code="skill_snapshot_release_failed",
                       data={"snapshot_ids": sorted(set(failed))})


def _forget_skills(row: SandboxConfig) -> list[str]:
    """The deleted config's installed skills go with it; their pinned archives are
    collected by the caller once this is committed."""
    now = utcnow()
    skills = list(db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.sandbox_config_id == row.id, InstalledSkill.deleted_at.is_(None))))
    for skill in skills:
        skill.deleted_at, skill.env_values, skill.updated_at = now, None, now
    return [skill.bundle_ref for skill in skills if skill.bundle_ref]
