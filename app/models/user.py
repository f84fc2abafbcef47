"""Users: one identity across tenants."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Boolean, String
from sqlalchemy.orm import Mapped, mapped_column, relationship
from werkzeug.security import check_password_hash, generate_password_hash

from app.extensions import db
from app.models.types import UTCDateTime, utcnow

if TYPE_CHECKING:  # the tenant module names User the same way: no import cycle
    from app.models.tenant import Membership


class User(db.Model):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    session_version: Mapped[int] = mapped_column(default=1)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    memberships: Mapped[list[Membership]] = relationship(back_populates="user")

    def set_password(self, password: str, method: str = "scrypt") -> None:
        """Store a new hash and end every existing session of this user."""
        self.password_hash = generate_password_hash(password, method=method)
        self.session_version = (self.session_version or 0) + 1

    def check_password(self, password: str) -> bool:
        return check_password_hash(self.password_hash, password)

    # Flask-Login: the login id carries the session version, so bumping it logs out everywhere.
    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def is_anonymous(self) -> bool:
        return False

    def get_id(self) -> str:
        return f"{self.id}:{self.session_version}"
