"""Every member's sessions in a workspace, as its admins see them: who
owns each one and its state, never any of their credentials."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from app.extensions import db
from app.models import SandboxConfig, SandboxSession, Tenant, User
from app.services import paging
from app.tenancy import owned_or_404


@dataclass(frozen=True)
class SessionRow:
    """A session as an admin sees it: who owns it, never any of their credentials."""

    session: SandboxSession
    config_name: str
    owner_id: int
    owner_name: str

    @property
    def status(self) -> str:
        return status_of(self.session)


def status_of(session: SandboxSession) -> str:
    """`idle` (no sandbox yet), `starting` (one is being created), `gone` (its sandbox
    is missing on its engine) or `live` (bound)."""
    return {"none": "idle", "creating": "starting", "gone": "gone"}.get(
        session.binding_state.value, "live")


def _workspace_query(tenant: Tenant, config_id: str | None):
    query = (select(SandboxSession, SandboxConfig.name, User.id, User.email)
             .join(SandboxConfig, SandboxConfig.id == SandboxSession.sandbox_config_id)
             .join(User, User.id == SandboxSession.user_id)
             .where(SandboxSession.tenant_id == tenant.id))
    if config_id is not None:
        query = query.where(SandboxSession.sandbox_config_id == config_id)
    return query


def list_workspace_sessions(tenant: Tenant, config_id: str | None = None) -> list[SessionRow]:
    """Every member's sessions in `tenant` (newest first), optionally on one config."""
    query = _workspace_query(tenant, config_id).order_by(SandboxSession.created_at.desc(),
                                                         SandboxSession.id)
    return [SessionRow(*row) for row in db.session.execute(query).all()]


def workspace_sessions_page(tenant: Tenant, config_id: str | None,
                            window: paging.Window) -> paging.Slice[SessionRow]:
    """One page of every member's sessions, newest first."""
    page = paging.keyset(_workspace_query(tenant, config_id),
                         (SandboxSession.created_at, SandboxSession.id), window, desc=True,
                         scalars=False, key_of=lambda row: (row[0].created_at, row[0].id))
    page.rows = [SessionRow(*row) for row in page.rows]
    return page


def get_workspace_session(tenant: Tenant, session_id: str) -> SandboxSession:
    """Any session of `tenant` (the admin's view); another workspace's is a 404."""
    return owned_or_404(SandboxSession, session_id, tenant.id, "No such session.", live=False)
