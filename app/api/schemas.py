"""Response and request schemas shared by several API modules."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from app.api._core import Out
from app.models import Role


class ErrorItem(Out):
    field: str
    message: str


class ErrorBody(Out):
    code: str = Field(description="Stable snake_case code; clients key on it.")
    message: str
    data: dict[str, Any] | None = None


class ErrorEnvelope(Out):
    success: bool = False
    error: ErrorBody


class TenantRef(Out):
    id: int
    name: str


class MembershipRef(Out):
    tenant_id: int
    tenant_name: str
    role: Role


class JobOut(Out):
    id: str
    kind: str
    status: str
    percent: int
    stage: str
    log: str
    error: str | None
    result: dict[str, Any] | None
    target_type: str | None
    target_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
