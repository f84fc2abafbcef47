"""Named sandbox configs (reference 1.1). Each secret of the config document is encrypted
at rest on its own, so a lost key blanks only the secrets it sealed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import SecretFieldsJSON, UTCDateTime, utcnow

CORDON_LEASE = timedelta(minutes=2)


class SandboxConfig(db.Model):
    __tablename__ = "sandbox_configs"
    __table_args__ = (
        # Unique name per tenant among live rows; deleted rows free their name.
        Index("uq_sandbox_configs_tenant_name", "tenant_id", "name", unique=True,
              postgresql_where=text("deleted_at IS NULL"),
              sqlite_where=text("deleted_at IS NULL")),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    description: Mapped[str] = mapped_column(Text, default="")
    sandbox_type: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(SecretFieldsJSON)
    cordoned_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    def is_cordoned(self, now: datetime) -> bool:
        """An expired lease counts as not cordoned (reference 9.4)."""
        return self.cordoned_at is not None and now - self.cordoned_at < CORDON_LEASE
