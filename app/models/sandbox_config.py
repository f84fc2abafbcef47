"""Named sandbox configs (reference 1.1). Each secret of the config document is encrypted
at rest on its own, so a lost key blanks only the secrets it sealed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, event, text
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import db
from app.models.types import SecretFieldsJSON, UTCDateTime, utcnow
from app.security.config_secrets import LostDocument

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

    def fill_lost_document(self) -> None:
        """An unreadable whole-document row still names its backend (its own column), so
        it lists and opens in the editor; everything else reads as unset."""
        doc = self.__dict__.get("config")  # no attribute event: this is not a change
        if isinstance(doc, LostDocument) and "sandbox_type" not in doc:
            doc.update({"sandbox_type": self.sandbox_type, self.sandbox_type: {},
                        "env_vars": {}, "network": None})

    def is_cordoned(self, now: datetime) -> bool:
        """An expired lease counts as not cordoned (reference 9.4)."""
        return self.cordoned_at is not None and now - self.cordoned_at < CORDON_LEASE


@event.listens_for(SandboxConfig, "load")
def _on_load(target: SandboxConfig, _context) -> None:
    target.fill_lost_document()


@event.listens_for(SandboxConfig, "refresh")
def _on_refresh(target: SandboxConfig, _context, _attrs) -> None:
    target.fill_lost_document()
