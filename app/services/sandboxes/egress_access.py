"""Asking for access (issue 24 item 5): a member whose command was refused a host asks
for it on their session's config, with a reason; an admin allows it (the host appended
to the config's `allow_out`: an ordinary, validated policy edit, applied to sandboxes
created from then on, as every policy edit is) or declines it. Both are audited.

One request per member, config and host stays pending at a time (asking again returns
it); a member has at most PENDING_PER_MEMBER pending in a workspace.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from app.backends.base import BackendError
from app.errors import NotFound, ValidationFailed
from app.extensions import db
from app.models import EgressAccessRequest, SandboxConfig, SandboxSession, Tenant, User
from app.models.session import BindingState
from app.models.types import utcnow
from app.services import Actor, audit
from app.services.quotas import OverQuota
from app.services.sandboxes import configs, document
from app.services.sandboxes.provider import backend_for
from app.services.sandboxes.targets import TargetError, classify

log = logging.getLogger("sandlot.egress_access")

PENDING_PER_MEMBER = 20
REASON_MAX = 500


def _host(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValidationFailed.one("host", "Name the host to allow.")
    try:
        target = classify(raw, wildcard_ok=False)
    except TargetError as exc:
        raise ValidationFailed.one("host", f"{raw.strip()[:80]!r} {exc}") from None
    return target.key.removesuffix("/32")


def request_access(tenant: Tenant, user: User, session: SandboxSession, host: Any,
                   reason: Any) -> EgressAccessRequest:
    """The member's pending request for `host` on their session's config (made now, or
    the one already pending)."""
    host = _host(host)
    reason = str(reason or "").strip()
    if len(reason) > REASON_MAX:
        raise ValidationFailed.one("reason", f"At most {REASON_MAX} characters.")
    config = db.session.get(SandboxConfig, session.sandbox_config_id)
    if config is None or config.deleted_at is not None or config.tenant_id != tenant.id:
        raise NotFound("The session's sandbox config no longer exists.")
    mine = select(EgressAccessRequest).where(
        EgressAccessRequest.tenant_id == tenant.id, EgressAccessRequest.user_id == user.id,
        EgressAccessRequest.status == "pending")
    existing = db.session.scalar(mine.where(EgressAccessRequest.sandbox_config_id == config.id,
                                            EgressAccessRequest.host == host))
    if existing is not None:
        return existing
    count = db.session.scalar(select(func.count()).select_from(mine.subquery()))
    if count >= PENDING_PER_MEMBER:
        raise OverQuota.of("egress_access_requests_per_member", PENDING_PER_MEMBER, count,
                           f"You have {count} access requests waiting for an admin; ask "
                           "again once some are answered.")
    row = EgressAccessRequest(id=str(uuid.uuid4()), tenant_id=tenant.id,
                              sandbox_config_id=config.id, user_id=user.id,
                              session_id=session.id, host=host, reason=reason,
                              status="pending", created_at=utcnow())
    db.session.add(row)
    audit.record(tenant, _Member(user), "egress_access.requested", "sandbox_config", config.id,
                 {"host": host, "config": config.name})
    db.session.commit()
    return row


class _Member:
    def __init__(self, user: User):
        self.actor_id, self.actor_label = user.id, user.email


def pending(tenant: Tenant) -> list[EgressAccessRequest]:
    return list(db.session.scalars(select(EgressAccessRequest).where(
        EgressAccessRequest.tenant_id == tenant.id, EgressAccessRequest.status == "pending")
        .order_by(EgressAccessRequest.created_at)))


def _pending_one(tenant: Tenant, request_id: str) -> EgressAccessRequest:
    row = db.session.get(EgressAccessRequest, request_id)
    if row is None or row.tenant_id != tenant.id or row.status != "pending":
        raise NotFound("No such access request waiting in this workspace.")
    return row


@dataclass(frozen=True)
class Running:
    """What approving did to the config's running sandboxes: `updated` now enforce the
    new policy; `kept` keep the one they were created with (no network of their own,
    a provider that fixes rules at creation, or a sandbox that did not answer)."""

    updated: int = 0
    kept: int = 0


def approve(tenant: Tenant, actor: Actor, request_id: str,
            running: bool = False) -> tuple[EgressAccessRequest, Running | None]:
    """Allow the host on the config: its `allow_out` gains the host (unless it has it).
    With `running`, the config's running sandboxes enforce the new policy too, at once."""
    row = _pending_one(tenant, request_id)
    config = db.session.get(SandboxConfig, row.sandbox_config_id)
    if config is None or config.deleted_at is not None:
        raise NotFound("The sandbox config no longer exists.")
    doc = document.masked(config.config)
    network = dict(doc.get("network") or {})
    allow = list(network.get("allow_out") or [])
    if row.host not in [entry.strip().lower() for entry in allow]:
        network["allow_out"] = [*allow, row.host]
        configs.update_config(tenant, actor, config, config.name, config.description,
                              {**doc, "network": network})
    row = _decide(tenant, actor, row, "approved", config.name)
    return row, (_apply_to_running(tenant, actor, config) if running else None)


def _apply_to_running(tenant: Tenant, actor: Actor, config: SandboxConfig) -> Running:
    """The saved policy on every bound sandbox of the config, and on each session's
    record of its policy (audited with the counts). A sandbox that cannot take it keeps
    its own; the next sandbox of the config gets the new one in any case."""
    doc = config.config
    policy = dataclasses.replace(document.resolve_policy(doc), name=config.name)
    summary = document.policy_summary(policy)
    bound = list(db.session.scalars(select(SandboxSession).where(
        SandboxSession.tenant_id == tenant.id, SandboxSession.sandbox_config_id == config.id,
        SandboxSession.binding_state == BindingState.bound,
        SandboxSession.sandbox_id.is_not(None))))
    updated = kept = 0
    if bound:
        backend = backend_for(doc)
        try:
            for session in bound:
                try:
                    applied = backend.apply_network_policy(session.sandbox_id, policy)
                except BackendError as exc:
                    log.info("policy not applied to sandbox of session %s: %s", session.id, exc)
                    applied = False
                if applied:
                    session.policy = summary
                updated, kept = updated + applied, kept + (not applied)
        finally:
            backend.close()
    audit.record(tenant, actor, "sandbox_config.policy_applied_to_running", "sandbox_config",
                 config.id, {"config": config.name, "updated": updated, "kept": kept})
    db.session.commit()
    return Running(updated, kept)


def decline(tenant: Tenant, actor: Actor, request_id: str) -> EgressAccessRequest:
    row = _pending_one(tenant, request_id)
    config = db.session.get(SandboxConfig, row.sandbox_config_id)
    return _decide(tenant, actor, row, "declined", config.name if config else "")


def _decide(tenant: Tenant, actor: Actor, row: EgressAccessRequest, status: str,
            config_name: str) -> EgressAccessRequest:
    row.status, row.decided_at = status, utcnow()
    row.decided_by = getattr(actor, "actor_id", None)
    audit.record(tenant, actor, f"egress_access.{status}", "sandbox_config",
                 row.sandbox_config_id, {"host": row.host, "config": config_name})
    db.session.commit()
    return row
