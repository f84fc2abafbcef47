"""Sandbox configs: create, update with the identity-change protocol, inventory, cordon.

Deleting a config reaches into sessions and skills, so it is an orchestrator of its own
(services/config_removal.py).

Reference 3.1 and 9.4: a mutation that changes where sandboxes live (backend identity)
cordons the config for a 2-minute lease, lists live sandboxes under the OLD identity,
refuses while any are live, and sweeps stragglers after the write. Every other
mutation refuses with 423 while a cordon holds.
"""

from __future__ import annotations

import copy
import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from app.backends.base import BackendError
from app.errors import Conflict, Locked, ValidationFailed
from app.extensions import db
from app.models import ApiKey, InstalledSkill, InstallStatus, Role, SandboxConfig, Tenant
from app.models.sandbox_config import CORDON_LEASE
from app.models.types import utcnow
from app.security import config_secrets
from app.services import Actor, audit, quotas
from app.services.sandboxes import document as sandbox_doc
from app.services.sandboxes import pools
from app.services.sandboxes.provider import backend_for, sandbox_filter

log = logging.getLogger("sandlot.sandbox_configs")
NAME_MAX, DESCRIPTION_MAX = 100, 2000


@dataclass
class Inventory:
    sandbox_count: int = 0
    session_ids: list[str] = field(default_factory=list)
    agent_names: list[str] = field(default_factory=list)
    unverifiable: bool = False
    # Live sandboxes no session owns (an install's or a deep check's, in flight): a forced
    # delete ends sessions, never these. Not part of the reference's Inventory object.
    sessionless: int = 0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["sessionless"]
        return data


def still_live(inventory: Inventory) -> Conflict:
    return Conflict("Sandboxes created from this config are still live; end those sessions "
                    "first.", code="sandboxes_still_live", data=inventory.as_dict())


def unverifiable() -> Conflict:
    return Conflict("The provider could not be listed, so live sandboxes cannot be ruled out; "
                    "retry, or force the operation.", code="sandbox_inventory_unverifiable")


def cordoned() -> Locked:
    return Locked("Another change to this config is in progress; try again in a moment.",
                  code="sandbox_config_cordoned")


# -- reads ------------------------------------------------------------------------------

def list_configs(tenant: Tenant) -> list[SandboxConfig]:
    query = (select(SandboxConfig)
             .where(SandboxConfig.tenant_id == tenant.id, SandboxConfig.deleted_at.is_(None))
             .order_by(SandboxConfig.name))
    return list(db.session.scalars(query))


class Caller(Protocol):
    """Who asks (the web's or the API's Principal): their role here, or the key they use."""

    role: Role | None
    api_key: ApiKey | None


def may_update(who: Caller) -> bool:
    """Whether `who` may update sandbox configs (the PUT route's guard: admin, or a
    full-access key): only such callers may reuse stored secrets in unsaved configs."""
    if who.api_key is not None:
        return bool(who.api_key.full_access)
    return who.role is not None and who.role.at_least(Role.admin)


def take_inventory(row: SandboxConfig, doc: dict[str, Any] | None = None) -> Inventory:
    """Live sandboxes of this config under `doc`'s identity (default: the stored one)."""
    try:
        sandboxes = backend_for(doc or row.config).list(sandbox_filter(row.tenant_id, row.id))
    except BackendError as exc:
        log.warning("inventory of sandbox config %s failed: %s", row.id, exc.reason)
        return Inventory(unverifiable=True)
    # Warm pool sandboxes: a claimed one is its session's; one still waiting is the pool's,
    # which drains by itself when the config changes or goes, so it holds nothing up.
    pooled = pools.sessions_of(sandboxes)
    sandboxes = [s for s in sandboxes if s.id not in pooled or pooled[s.id]]
    sessions = sorted(({s.metadata.get("sandlot_session_id", "") for s in sandboxes}
                       | {sid for sid in pooled.values() if sid}) - {""})
    sessionless = sum(s.metadata.get("sandlot_purpose") not in ("session", "pool")
                      for s in sandboxes)
    return Inventory(sandbox_count=len(sandboxes), session_ids=sessions, sessionless=sessionless)


# -- writes -----------------------------------------------------------------------------

def create_config(tenant: Tenant, actor: Actor, name: str, description: str,
                  raw: Any) -> SandboxConfig:
    # `***` with nothing stored is no secret, never the three asterisks (issue 14 item 7).
    raw = config_secrets.unmask_new(copy.deepcopy(raw))
    name, description, doc = _validated(name, description, lambda: sandbox_doc.validate(raw))
    _check_unique(tenant, name)
    quotas.admit_config(tenant)
    row = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant.id, name=name,
                        description=description, sandbox_type=doc["sandbox_type"], config=doc)
    db.session.add(row)
    audit.record(tenant, actor, "sandbox_config.created", "sandbox_config", row.id,
                 {"name": name, "sandbox_type": row.sandbox_type})
    _commit_unique(name)
    return row


def update_config(tenant: Tenant, actor: Actor, row: SandboxConfig, name: str,
                  description: str, raw: Any, force: bool = False) -> SandboxConfig:
    """Reference 3.1.4, with decisions 10: an unreachable inventory refuses unless forced."""
    if row.is_cordoned(utcnow()):
        raise cordoned()
    stored = row.config
    merged = sandbox_doc.merge(raw, stored) if isinstance(raw, dict) else raw
    name, description, doc = _validated(name, description, lambda: sandbox_doc.validate(merged))
    for key in sandbox_doc.SERVER_OWNED:
        doc[key] = stored.get(key)
    _guard_snapshot(row, stored, doc)
    if name != row.name:
        _check_unique(tenant, name, exclude=row.id)
    values = {"name": name, "description": description, "config": doc,
              "sandbox_type": doc["sandbox_type"], "updated_at": utcnow()}
    if sandbox_doc.identity(doc) == sandbox_doc.identity(stored):
        _write_uncordoned(row, values)
    else:
        _change_identity(row, stored, values, force)
    audit.record(tenant, actor, "sandbox_config.updated", "sandbox_config", row.id,
                 {"name": name, "identity_changed":
                  sandbox_doc.identity(doc) != sandbox_doc.identity(stored)})
    _commit_unique(name)
    db.session.refresh(row)
    return row


def set_scripts_disabled(tenant: Tenant, actor: Actor, disabled: bool) -> bool:
    if tenant.scripts_disabled != disabled:
        tenant.scripts_disabled = disabled
        audit.record(tenant, actor, "workspace.scripts_disabled" if disabled
                     else "workspace.scripts_enabled", "tenant", tenant.id)
        db.session.commit()
    return tenant.scripts_disabled


# -- internals --------------------------------------------------------------------------

def _validated(name: Any, description: Any, validate_doc) -> tuple[str, str, dict[str, Any]]:
    """Names and document checked together, so every problem is reported at once."""
    errors: list[dict[str, str]] = []
    doc: dict[str, Any] = {}
    try:
        name, description = _check_names(name, description)
    except ValidationFailed as exc:
        errors += exc.errors
    try:
        doc = validate_doc()
    except ValidationFailed as exc:
        errors += exc.errors
    if errors:
        raise ValidationFailed(errors)
    return name, description, doc


def _check_names(name: Any, description: Any) -> tuple[str, str]:
    name = name.strip() if isinstance(name, str) else ""
    description = description.strip() if isinstance(description, str) else ""
    errors = []
    if not name:
        errors.append({"field": "name", "message": "Name is required."})
    elif "\0" in name:
        errors.append({"field": "name", "message": "Name must not contain NUL characters."})
    elif len(name) > NAME_MAX:
        errors.append({"field": "name", "message": f"Name must be at most {NAME_MAX} characters."})
    if "\0" in description:
        errors.append({"field": "description",
                       "message": "Description must not contain NUL characters."})
    elif len(description) > DESCRIPTION_MAX:
        errors.append({"field": "description", "message":
                       f"Description must be at most {DESCRIPTION_MAX} characters."})
    if errors:
        raise ValidationFailed(errors)
    return name, description


def _check_unique(tenant: Tenant, name: str, exclude: str | None = None) -> None:
    query = select(SandboxConfig.id).where(
        SandboxConfig.tenant_id == tenant.id, SandboxConfig.name == name,
        SandboxConfig.deleted_at.is_(None))
    found = db.session.scalar(query)
    if found is not None and found != exclude:
        raise Conflict(f"A sandbox config named {name!r} already exists.")


def _commit_unique(name: str) -> None:
    try:
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        raise Conflict(f"A sandbox config named {name!r} already exists.") from None


def _guard_snapshot(row: SandboxConfig, stored: dict[str, Any], doc: dict[str, Any]) -> None:
    """A baked skill image pins identity, template, cube DNS and desktop (3.1.4 step 3);
    so does a skill run in flight, whose image is about to be baked."""
    busy = db.session.scalar(select(InstalledSkill.id).where(
        InstalledSkill.sandbox_config_id == row.id, InstalledSkill.deleted_at.is_(None),
        InstalledSkill.status.in_([InstallStatus.installing, InstallStatus.removing])).limit(1))
    if not (stored.get("skill_image") or {}).get("snapshot_id") and busy is None:
        return
    if _pinned(stored) != _pinned(doc):
        raise Conflict("Installed skills are baked into this config's image; uninstall them "
                       "before changing the backend, template, DNS servers or desktop mode.",
                       code="skill_snapshot_blocks_template")


def _pinned(doc: dict[str, Any]) -> tuple:
    dns = (doc.get("cube") or {}).get("dns_servers") if doc["sandbox_type"] == "cube" else None
    return (sandbox_doc.identity(doc), sandbox_doc.template_of(doc), dns,
            bool(doc.get("desktop_enabled")))


def _write_uncordoned(row: SandboxConfig, values: dict[str, Any]) -> None:
    """Write only if no live cordon holds: check and write are one statement."""
    lease_start = utcnow() - CORDON_LEASE
    result = db.session.execute(
        update(SandboxConfig)
        .where(SandboxConfig.id == row.id, SandboxConfig.deleted_at.is_(None),
               or_(SandboxConfig.cordoned_at.is_(None), SandboxConfig.cordoned_at < lease_start))
        .values(**values, cordoned_at=None)
    )
    if result.rowcount != 1:
        db.session.rollback()
        raise cordoned()


def cordon(row: SandboxConfig) -> datetime:
    """Hold the config's cordon (a lease) for one identity-changing mutation; 423 if held."""
    now = utcnow()
    result = db.session.execute(
        update(SandboxConfig)
        .where(SandboxConfig.id == row.id, SandboxConfig.deleted_at.is_(None),
               or_(SandboxConfig.cordoned_at.is_(None),
                   SandboxConfig.cordoned_at < now - CORDON_LEASE))
        .values(cordoned_at=now)
    )
    db.session.commit()
    if result.rowcount != 1:
        raise cordoned()
    return now


def release(row: SandboxConfig, stamp: datetime) -> None:
    """Drop the cordon taken at `stamp` (a failed mutation), with the session rolled back."""
    db.session.rollback()
    db.session.execute(update(SandboxConfig)
                       .where(SandboxConfig.id == row.id, SandboxConfig.cordoned_at == stamp)
                       .values(cordoned_at=None))
    db.session.commit()


def _change_identity(row: SandboxConfig, stored: dict[str, Any], values: dict[str, Any],
                     force: bool) -> None:
    stamp = cordon(row)
    try:
        inventory = take_inventory(row, stored)
        if inventory.sandbox_count:
            raise still_live(inventory)
        if inventory.unverifiable and not force:
            raise unverifiable()
    except Exception:
        release(row, stamp)
        raise
    db.session.execute(update(SandboxConfig).where(SandboxConfig.id == row.id)
                       .values(**values, cordoned_at=None))
    if not inventory.unverifiable:
        _sweep(row, stored)


def _sweep(row: SandboxConfig, stored: dict[str, Any]) -> None:
    """Delete sandboxes that appeared under the old identity during the race."""
    try:
        backend = backend_for(stored)
        for sandbox in backend.list(sandbox_filter(row.tenant_id, row.id)):
            backend.delete(sandbox.id)
    except BackendError as exc:
        log.warning("sweep of sandbox config %s failed: %s", row.id, exc.reason)
