"""Sandbox configs: create, update with the identity-change protocol, delete, inventory.

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
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from app.auth.principal import Principal
from app.backends import registry
from app.backends.base import Backend, BackendError
from app.errors import Conflict, Locked, ValidationFailed
from app.extensions import db
from app.models import InstalledSkill, InstallStatus, Role, SandboxConfig, Tenant
from app.models.sandbox_config import CORDON_LEASE
from app.models.types import utcnow
from app.security import config_secrets
from app.services import Actor, audit
from app.services.personal import values as personal_env
from app.services.sandboxes import document as sandbox_doc
from app.services.sandboxes import endpoints
from app.services.sandboxes import image as skill_image

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


def backend_for(doc: dict[str, Any], sandbox_id: str | None = None,
                traffic_token: str | None = None) -> Backend:
    """A backend client for a config, with what the operator decides filled in: the
    Docker engine's URL and TLS files, and whether private endpoints may be reached.
    Given a sandbox and its traffic token, the client is primed with them (Cube hands
    the token out once, at creation, and every later call needs it)."""
    kind = doc["sandbox_type"]
    settings = dict(doc.get(kind) or {})
    settings["allow_private_endpoints"] = endpoints.allow_private(doc)
    if kind == "docker":
        name = endpoints.engine_of(settings)
        engine = endpoints.engine(name)
        if engine is None:
            raise BackendError("This config's Docker engine is not offered by this deployment; "
                               "pick one of the operator's engines in the config.")
        settings.update(engine=engine.name, host=engine.url, tls_cert_path=engine.tls_dir)
    backend = registry.make_backend(kind, settings)
    remember = getattr(backend, "remember_traffic_token", None)
    if remember is not None and sandbox_id and traffic_token:
        remember(sandbox_id, traffic_token)
    return backend


def may_update(who: Principal) -> bool:
    """Whether `who` may update sandbox configs (the PUT route's guard: admin, or a
    full-access key): only such callers may reuse stored secrets in unsaved configs."""
    if who.api_key is not None:
        return bool(who.api_key.full_access)
    return who.role is not None and who.role.at_least(Role.admin)


def sandbox_filter(tenant_id: int, config_id: str) -> dict[str, str]:
    return {"sandlot_tenant_id": str(tenant_id), "sandlot_sandbox_config_id": config_id}


def take_inventory(row: SandboxConfig, doc: dict[str, Any] | None = None) -> Inventory:
    """Live sandboxes of this config under `doc`'s identity (default: the stored one)."""
    try:
        sandboxes = backend_for(doc or row.config).list(sandbox_filter(row.tenant_id, row.id))
    except BackendError as exc:
        log.warning("inventory of sandbox config %s failed: %s", row.id, exc.reason)
        return Inventory(unverifiable=True)
    sessions = sorted({s.metadata.get("sandlot_session_id", "") for s in sandboxes} - {""})
    sessionless = sum(s.metadata.get("sandlot_purpose") != "session" for s in sandboxes)
    return Inventory(sandbox_count=len(sandboxes), session_ids=sessions, sessionless=sessionless)


# -- writes -----------------------------------------------------------------------------

def create_config(tenant: Tenant, actor: Actor, name: str, description: str,
                  raw: Any) -> SandboxConfig:
    # `***` with nothing stored is no secret, never the three asterisks (issue 14 item 7).
    raw = config_secrets.unmask_new(copy.deepcopy(raw))
    name, description, doc = _validated(name, description, lambda: sandbox_doc.validate(raw))
    _check_unique(tenant, name)
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


def delete_config(tenant: Tenant, actor: Actor, row: SandboxConfig, force: bool = False) -> None:
    """Reference 3.1.5 with issue 11 item 6: cordon, refuse while live, soft-delete. Force
    overrides an unverifiable inventory and ends every member's sessions on the config
    (their sandboxes are removed by jobs); it never overrides the live sandbox of an
    install or a check in flight."""
    stamp = _cordon(row)
    try:
        inventory = take_inventory(row)
        if inventory.unverifiable and not force:
            raise unverifiable()
        if inventory.sandbox_count and (not force or inventory.sessionless):
            raise still_live(inventory)
        _release_snapshot(row, force)
    except Exception:
        _release(row, stamp)
        raise
    if force:
        from app.services.sessions import ending

        ending.end_config_sessions(tenant, actor, row, inventory.session_ids)
    db.session.execute(update(SandboxConfig).where(SandboxConfig.id == row.id)
                       .values(deleted_at=utcnow(), cordoned_at=None))
    bundles = _forget_skills(row)
    personal_env.forget_config(row.id)  # members' values scoped to it go too (decisions 9)
    audit.record(tenant, actor, "sandbox_config.deleted", "sandbox_config", row.id,
                 {"name": row.name, "forced": force})
    db.session.commit()
    if bundles:
        from app.services.skills import catalog as skills

        for key in set(bundles):
            skills.collect(tenant.id, key)


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


def _cordon(row: SandboxConfig) -> datetime:
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


def _release(row: SandboxConfig, stamp: datetime) -> None:
    db.session.rollback()
    db.session.execute(update(SandboxConfig)
                       .where(SandboxConfig.id == row.id, SandboxConfig.cordoned_at == stamp)
                       .values(cordoned_at=None))
    db.session.commit()


def _change_identity(row: SandboxConfig, stored: dict[str, Any], values: dict[str, Any],
                     force: bool) -> None:
    stamp = _cordon(row)
    try:
        inventory = take_inventory(row, stored)
        if inventory.sandbox_count:
            raise still_live(inventory)
        if inventory.unverifiable and not force:
            raise unverifiable()
    except Exception:
        _release(row, stamp)
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
