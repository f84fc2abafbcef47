"""The config's skill image: the snapshot ledger (reference 1.8) and the `skill_image`
pointer (`snapshot_id`, `generation`, `built_at`, `base_template_id`,
`owner_fingerprint`) that new sandboxes boot from (reference 9.1).

Every provider snapshot is a ledger row before it exists (`building`, with the name
chosen up front), so a build abandoned half-way is found and released by that name. The
pointer only moves under the config's image lock, and only while the config still has
the identity (account, engine) the snapshot was built under.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from app.backends.base import Backend, BackendError
from app.extensions import db
from app.models import (
    BindingState,
    SandboxConfig,
    SandboxSession,
    SkillSnapshot,
    SnapshotState,
    SnapshotTrigger,
)
from app.models.types import utcnow
from app.services.sandboxes import document
from app.services.sandboxes.provider import backend_for

log = logging.getLogger("sandlot.skills.image")
RETENTION_BASE = timedelta(hours=24)
RETENTION_MARGIN = timedelta(hours=1)


class IdentityChanged(Exception):
    """The config's credentials or engine changed while the image was being built."""


def fingerprint(doc: dict[str, Any]) -> str:
    """Who owns a snapshot: a digest of the identity fields (never the fields themselves)."""
    return hashlib.sha256(repr(document.identity(doc)).encode()).hexdigest()[:32]


def pointer(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc.get("skill_image") or {})


def generation(doc: dict[str, Any]) -> int:
    return int(pointer(doc).get("generation") or 0)


def current_snapshot(doc: dict[str, Any]) -> str | None:
    """The snapshot new sandboxes boot from, if it was built under today's identity."""
    image = pointer(doc)
    if image.get("snapshot_id") and image.get("owner_fingerprint") == fingerprint(doc):
        return str(image["snapshot_id"])
    return None


def boot_template(doc: dict[str, Any]) -> str:
    """The template or image a new sandbox of this config starts from (reference 9.1)."""
    return current_snapshot(doc) or document.template_of(doc)


def planned_name() -> str:
    """A snapshot's name, chosen before it is built (reference 1.8): random, so an image
    list shows no workspace or config id (the ledger row and the image's labels do)."""
    return f"sandlot-sk-{uuid.uuid4().hex}"


def begin(config: SandboxConfig, skill_id: str | None, trigger: SnapshotTrigger,
          size_bytes: int | None = None) -> SkillSnapshot:
    """A ledger row in `building`, committed before the provider is asked for anything."""
    doc = config.config
    ledger_id = str(uuid.uuid4())
    gen = generation(doc) + 1
    row = SkillSnapshot(
        id=ledger_id, tenant_id=config.tenant_id, sandbox_config_id=config.id,
        skill_id=skill_id, provider=doc["sandbox_type"], parent_snapshot_id=current_snapshot(doc),
        generation=gen, planned_name=planned_name(),
        trigger=trigger, state=SnapshotState.building, size_bytes=size_bytes)
    db.session.add(row)
    db.session.commit()
    return row


def build(backend: Backend, sandbox_id: str, row: SkillSnapshot,
          carry: tuple[Any, list[str], bool] | None = None) -> str:
    """Ask the provider for the snapshot and mark the ledger row `active`. `carry`
    (Docker's contained installs): (packed paths, paths they replace, with the root
    filesystem's changes), see app/backends/docker/carry.py."""
    if carry is not None:
        packed, replace, with_root = carry
        snapshot_id = backend.create_snapshot_carrying(sandbox_id, row.planned_name, packed,
                                                       replace, with_root)
    else:
        snapshot_id = backend.create_snapshot(sandbox_id, row.planned_name)
    row.snapshot_id, row.state = snapshot_id, SnapshotState.active
    db.session.commit()
    return snapshot_id


def snapshot_ref(backend: Backend, name: str) -> str:
    """The provider id of the snapshot named `name` (Docker: derived; E2B/Cube: looked
    up), to release a build whose provider call may or may not have happened."""
    ref = getattr(backend, "snapshot_id_for", None)
    return ref(name) if ref is not None else name


def switch(config_id: str, snapshot_id: str | None, owner: str, base_template: str) -> int:
    """Point the config at `snapshot_id` (None: the plain template), generation + 1.

    Refuses (IdentityChanged) when the config's identity is no longer `owner`: a snapshot
    built under other credentials is never adopted (reference 7.2 step 17.3).
    """
    # FOR UPDATE on PostgreSQL (a concurrent config edit waits); populate_existing so the
    # check reads the row as it is now, not as this session first loaded it.
    config = db.session.scalar(select(SandboxConfig).where(SandboxConfig.id == config_id)
                               .with_for_update().execution_options(populate_existing=True))
    if config is None or config.deleted_at is not None:
        db.session.rollback()
        raise IdentityChanged("the sandbox config was deleted during the build")
    doc = dict(config.config)
    if fingerprint(doc) != owner:
        db.session.rollback()
        raise IdentityChanged("the sandbox config's credentials changed during the build")
    gen = generation(doc) + 1
    doc["skill_image"] = {"snapshot_id": snapshot_id, "generation": gen,
                          "built_at": utcnow().isoformat(), "base_template_id": base_template,
                          "owner_fingerprint": owner}
    config.config = doc
    db.session.commit()
    return gen


def supersede(config_id: str, keep: str | None) -> None:
    """Every other active snapshot of the config becomes `superseded` (kept for retention)."""
    db.session.execute(update(SkillSnapshot).where(
        SkillSnapshot.sandbox_config_id == config_id, SkillSnapshot.state == SnapshotState.active,
        SkillSnapshot.id != (keep or "")).values(state=SnapshotState.superseded,
                                                 superseded_at=utcnow()))
    db.session.commit()


def mark_stale(config: SandboxConfig) -> int:
    """Rollout (reference 7.2 step 19): live sessions rebuild at their next exec, unless
    the config rolls out to new sessions only."""
    if config.config.get("skill_rollout") == "new_session":
        return 0
    result = db.session.execute(update(SandboxSession).where(
        SandboxSession.sandbox_config_id == config.id,
        SandboxSession.binding_state == BindingState.bound).values(stale=True))
    db.session.commit()
    return result.rowcount


def release(backend: Backend, row: SkillSnapshot) -> bool:
    """Delete the provider snapshot of a ledger row (by its planned name if the provider
    call was ambiguous); True when it is gone."""
    snapshot_id = row.snapshot_id or snapshot_ref(backend, row.planned_name)
    try:
        backend.delete_snapshot(snapshot_id)
    except BackendError as exc:
        row.error = exc.reason[:500]
        db.session.commit()
        log.warning("snapshot %s not released yet: %s", snapshot_id, exc.reason)
        return False
    row.state, row.deleted_at, row.error = SnapshotState.deleted, utcnow(), None
    db.session.commit()
    return True


def retention(doc: dict[str, Any]) -> timedelta:
    """Reference 1.8: 24 h + the config's sandbox TTL + 1 h, so paused sandboxes booted
    from a superseded snapshot can still resume."""
    return RETENTION_BASE + timedelta(seconds=document.ttl_of(doc)) + RETENTION_MARGIN


def release_expired(config: SandboxConfig, backend: Backend) -> int:
    """Release superseded snapshots past retention, and builds abandoned by dead runs."""
    now = utcnow()
    rows = db.session.scalars(select(SkillSnapshot).where(
        SkillSnapshot.sandbox_config_id == config.id,
        SkillSnapshot.state == SnapshotState.superseded,
        SkillSnapshot.superseded_at < now - retention(config.config)))
    return sum(release(backend, row) for row in list(rows))


def sweep_expired(limit: int = 50) -> int:
    """The reaper's pass (reference 1.8): superseded snapshots of every config released
    once past retention, not only when the same config next installs. Returns how many
    went; one still in use (a paused sandbox booted from it) is retried next pass."""
    floor = utcnow() - RETENTION_BASE - RETENTION_MARGIN  # the shortest retention there is
    configs = db.session.scalars(select(SandboxConfig).where(
        SandboxConfig.deleted_at.is_(None), SandboxConfig.id.in_(
            select(SkillSnapshot.sandbox_config_id).where(
                SkillSnapshot.state == SnapshotState.superseded,
                SkillSnapshot.superseded_at < floor))).limit(limit))
    released = 0
    for config in list(configs):
        try:
            backend = backend_for(config.config)
        except BackendError as exc:  # the engine is not offered now: the next pass retries
            log.warning("snapshot sweep skipped config %s: %s", config.id, exc.reason)
            continue
        try:
            released += release_expired(config, backend)
        finally:
            backend.close()
    return released


def release_all(config: SandboxConfig, backend: Backend) -> list[str]:
    """Config delete (decisions 9): release every ledger snapshot; the ids that failed."""
    rows = db.session.scalars(select(SkillSnapshot).where(
        SkillSnapshot.sandbox_config_id == config.id,
        SkillSnapshot.state != SnapshotState.deleted))
    return [row.snapshot_id or row.planned_name for row in list(rows) if not release(backend, row)]
