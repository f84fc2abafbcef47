"""The skill catalog (reference 1.6) and skills installed onto sandbox configs (reference 1.7).

A catalog entry is a workspace-wide definition holding one validated bundle; an installed
skill is that definition built into one config's image. Both name their bundle by
`bundle_ref` (a blob-store key, content-addressed) and `bundle_sha256`, so an install keeps
the archive it was built from even after the definition is registered again.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Enum, ForeignKey, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import EncryptedJSON, UTCDateTime, utcnow


class SkillCatalogEntry(db.Model):
    __tablename__ = "skill_catalog"
    __table_args__ = (
        # Unique name per tenant among live rows; a deleted definition frees its name.
        Index("uq_skill_catalog_tenant_name", "tenant_id", "name", unique=True,
              postgresql_where=text("deleted_at IS NULL"),
              sqlite_where=text("deleted_at IS NULL")),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))  # the identifier (slug)
    # The name as the SKILL.md writes it (any script); "" for rows older than the column.
    display_name: Mapped[str] = mapped_column(String(255), default="", server_default="")
    version: Mapped[str] = mapped_column(String(64), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    instructions: Mapped[str] = mapped_column(Text, default="")
    bundle_ref: Mapped[str] = mapped_column(String(255))
    bundle_sha256: Mapped[str] = mapped_column(String(64))
    # What the owner should know about the bundle: frontmatter repairs, confusable names.
    notes: Mapped[list[str]] = mapped_column(JSON, default=list, server_default=text("'[]'"))
    categories: Mapped[list[str]] = mapped_column(JSON, default=list)
    # What it was registered from: the source string as given, or "upload".
    source: Mapped[str] = mapped_column(Text, default="upload")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class InstallStatus(enum.StrEnum):
    installing = "installing"
    ready = "ready"
    failed = "failed"
    removing = "removing"


class InstalledSkill(db.Model):
    """One skill on one sandbox config. The install pipeline (job `install_skill`) owns
    `status` after the row is accepted; the catalog only creates and re-arms rows."""

    __tablename__ = "installed_skills"
    __table_args__ = (
        # One live row per (config, name); an uninstalled (soft-deleted) row frees its name.
        Index("uq_installed_skills_config_name", "sandbox_config_id", "name", unique=True,
              postgresql_where=text("deleted_at IS NULL"),
              sqlite_where=text("deleted_at IS NULL")),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    sandbox_config_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_configs.id", ondelete="CASCADE"), index=True)
    catalog_id: Mapped[str | None] = mapped_column(
        ForeignKey("skill_catalog.id", ondelete="SET NULL"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(64), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    # The SKILL.md body; deliberately never part of a response (reference 3.2).
    instructions: Mapped[str] = mapped_column(Text, default="")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[InstallStatus] = mapped_column(
        Enum(InstallStatus, name="install_status", native_enum=False, length=20,
             validate_strings=True),
        default=InstallStatus.installing,
    )
    error: Mapped[str | None] = mapped_column(Text)
    # The archive this install is built from: pinned here, independent of the catalog row.
    bundle_ref: Mapped[str] = mapped_column(String(255), default="")
    bundle_sha256: Mapped[str] = mapped_column(String(64), default="")
    # Env declarations [{name, description, required}] (reference 1.10), names only.
    envs: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # The admin's workspace-wide values for declared names, {NAME: value}, encrypted as
    # one token and kept apart from `envs` so no projection of `envs` can carry a value.
    env_values: Mapped[dict[str, str] | None] = mapped_column(EncryptedJSON)
    # What the image still serves while an upgrade is pending or failed: {version,
    # description, instructions, bundle_sha256, bundle_ref, snapshot_id}.
    served: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The provider snapshot that contains this skill (reference 1.7).
    installed_snapshot_id: Mapped[str | None] = mapped_column(String(255))
    # Transcript locators (reference 7.5): the job that ran the install and the run id
    # its events carry.
    install_session_id: Mapped[str | None] = mapped_column(String(36))
    install_message_id: Mapped[str | None] = mapped_column(String(36))
    # Heartbeat of the run in flight (reference 7.1: a fresh one dedupes a repeat install).
    installing_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set by POST .../stop; the running job sees it through the row, in any process.
    stop_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    job_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
