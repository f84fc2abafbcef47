"""Members' own variables (reference 1.9, decisions 9): one encrypted value per (tenant,
principal, sandbox config, skill or config-wide, name).

`skill_id` is '' for a config-wide (sandbox scope) value, else an installed skill's id. It
has no foreign key because '' is not a row; the services delete scoped values when a skill
or config goes (decisions 9). The value is never serialised outward.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import EncryptedText, UTCDateTime, utcnow

CONFIG_WIDE = ""
PRINCIPAL_USER = "user"


class PersonalEnvVar(db.Model):
    __tablename__ = "personal_env_vars"
    __table_args__ = (
        UniqueConstraint("tenant_id", "principal_type", "principal_id", "sandbox_config_id",
                         "skill_id", "name", name="uq_personal_env_vars_key"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    principal_type: Mapped[str] = mapped_column(String(32))
    principal_id: Mapped[str] = mapped_column(String(512))
    sandbox_config_id: Mapped[str] = mapped_column(
        ForeignKey("sandbox_configs.id", ondelete="CASCADE"), index=True)
    skill_id: Mapped[str] = mapped_column(String(36), default=CONFIG_WIDE, index=True)
    name: Mapped[str] = mapped_column(String(128))
    value: Mapped[str] = mapped_column(EncryptedText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
