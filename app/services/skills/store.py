"""Where skill bundles live: the configured blob store, one namespace per workspace, and
collection of a bundle nothing of its workspace names any more.

The catalog puts bundles here; installs read them back and collect what they release.
"""

from __future__ import annotations

import logging

from flask import current_app
from sqlalchemy import or_, select

from app.extensions import db
from app.models import InstalledSkill, SkillCatalogEntry
from app.storage import blobstore

log = logging.getLogger("sandlot.skills")


def blobs() -> blobstore.BlobStore:
    """The configured blob store, built once per app and setting."""
    config = current_app.config
    wanted = (config["SKILL_BUNDLE_DIR"], config.get("SKILL_BUNDLE_STORE") or "")
    cached = current_app.extensions.get("sandlot_blobstore")
    if cached is None or cached[0] != wanted:
        cached = (wanted, blobstore.from_settings(*wanted))
        current_app.extensions["sandlot_blobstore"] = cached
    return cached[1]


def namespace(tenant_id: int) -> str:
    return f"t{tenant_id}"


def collect(tenant_id: int, key: str) -> bool:
    """Delete blob `key` if nothing of the workspace names it any more (best effort)."""
    if _blob_referenced(tenant_id, key):
        return False
    try:
        blobs().delete(key)
    except blobstore.BlobStoreError as exc:
        log.warning("could not delete skill bundle %s: %s", key, exc)
        return False
    return True


def _blob_referenced(tenant_id: int, key: str) -> bool:
    catalog = select(SkillCatalogEntry.id).where(
        SkillCatalogEntry.tenant_id == tenant_id, SkillCatalogEntry.bundle_ref == key,
        SkillCatalogEntry.deleted_at.is_(None))
    if db.session.scalar(catalog.limit(1)) is not None:
        return True
    installs = select(InstalledSkill).where(
        InstalledSkill.tenant_id == tenant_id, InstalledSkill.deleted_at.is_(None),
        or_(InstalledSkill.bundle_ref == key, InstalledSkill.served.is_not(None)))
    return any(row.bundle_ref == key or (row.served or {}).get("bundle_ref") == key
               for row in db.session.scalars(installs))
