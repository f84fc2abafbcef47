"""API keys: created once with a plaintext shown once, then only a digest remains."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from app.errors import Conflict, ValidationFailed
from app.extensions import db
from app.models import ApiKey, Tenant
from app.models.types import utcnow
from app.security import apikeys
from app.services import Actor, audit, paging

CAPABILITIES = ("manage_vector_stores",)
LAST_USED_RESOLUTION = timedelta(minutes=1)


def list_keys(tenant: Tenant) -> list[ApiKey]:
    query = select(ApiKey).where(ApiKey.tenant_id == tenant.id).order_by(ApiKey.id.desc())
    return list(db.session.scalars(query))


@dataclass
class KeyPage:
    """One numbered page of a workspace's API keys (the API keys page, like Members)."""

    rows: list[ApiKey]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


def page_keys(tenant: Tenant, page: int = 1, per_page: int = 50) -> KeyPage:
    """The workspace's keys newest first, page `page` (clamped to the last): two statements
    whatever the number of keys."""
    total = db.session.scalar(
        select(func.count()).select_from(ApiKey).where(ApiKey.tenant_id == tenant.id)) or 0
    page = min(max(1, page), max(1, -(-total // per_page)))
    rows = db.session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant.id)
                              .order_by(ApiKey.id.desc())
                              .offset((page - 1) * per_page).limit(per_page))
    return KeyPage(list(rows), total, page, per_page)


def keys_page(tenant: Tenant, window: paging.Window) -> paging.Slice[ApiKey]:
    """One page of the workspace's API keys, newest first."""
    query = select(ApiKey).where(ApiKey.tenant_id == tenant.id)
    return paging.keyset(query, (ApiKey.id,), window, desc=True)


def create_key(
    tenant: Tenant, actor: Actor, *, name: str, full_access: bool, capabilities: list[str],
    expires_at: datetime | None, pepper: str,
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the plaintext, which is never stored."""
    _validate(name, full_access, capabilities, expires_at)
    material = apikeys.new_key()
    key = ApiKey(
        tenant_id=tenant.id, name=name.strip(), prefix=material.prefix,
        digest=apikeys.digest(material.plaintext, pepper), full_access=full_access,
        capabilities=sorted(set(capabilities)),
        expires_at=_in_utc(expires_at) if expires_at is not None else None,
        created_by_id=actor.actor_id,
    )
    db.session.add(key)
    db.session.flush()
    audit.record(tenant, actor, "api_key.created", "api_key", key.id,
                 {"name": key.name, "prefix": key.prefix, "full_access": full_access,
                  "capabilities": key.capabilities})
    db.session.commit()
    return key, material.plaintext


def revoke_key(tenant: Tenant, actor: Actor, key: ApiKey) -> ApiKey:
    if key.revoked_at is not None:
        raise Conflict("This key is already revoked.")
    key.revoked_at = utcnow()
    audit.record(tenant, actor, "api_key.revoked", "api_key", key.id,
                 {"name": key.name, "prefix": key.prefix})
    db.session.commit()
    return key


def authenticate_key(plaintext: str, pepper: str) -> ApiKey | None:
    """The usable key matching `plaintext`, or None. Touches `last_used_at` coarsely."""
    prefix = apikeys.parse_prefix(plaintext)
    if prefix is None:
        return None
    key = db.session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
    now = utcnow()
    if key is None or not apikeys.matches(plaintext, key.digest, pepper) or not key.is_usable(now):
        return None
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        key.last_used_at = now
        db.session.commit()
    return key


def _in_utc(moment: datetime) -> datetime | None:
    """`moment` in UTC; None when naive or when UTC falls outside datetime's range."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        return None
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59-23:59
        return None


def _validate(name: str, full_access: bool, capabilities: list[str], expires_at) -> None:
    errors = []
    if not name.strip():
        errors.append({"field": "name", "message": "Give the key a name."})
    elif "\x00" in name:  # PostgreSQL text cannot hold NUL
        errors.append({"field": "name", "message": "Remove the NUL character."})
    elif len(name.strip()) > 100:
        errors.append({"field": "name", "message": "Use at most 100 characters."})
    for index, capability in enumerate(capabilities):
        if capability not in CAPABILITIES:
            # The sentence names what a key may do; the machine names go in `allowed`.
            errors.append({"field": f"capabilities[{index}]", "allowed": list(CAPABILITIES),
                           "message": "Unknown capability: a key can only be allowed to run "
                                      "sandbox checks."})
    if not full_access and not capabilities:
        errors.append({"field": "capabilities",
                       "message": "Choose full access or at least one capability."})
    if expires_at is not None and _in_utc(expires_at) is None:
        errors.append({"field": "expires_at", "message": "Give a date and time with a time "
                       "zone, between the years 1 and 9999 in UTC."})
    elif expires_at is not None and expires_at <= utcnow():
        errors.append({"field": "expires_at", "message": "The expiry must be in the future."})
    if errors:
        raise ValidationFailed(errors)
