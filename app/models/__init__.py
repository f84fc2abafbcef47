"""Every model, imported so that metadata and Alembic see them all."""

from app.models.api_key import ApiKey
from app.models.audit import AuditEvent
from app.models.egress_event import EgressAccessRequest, EgressEvent
from app.models.exec_run import ExecRun, RunStatus
from app.models.invitation import Invitation, InvitationStatus
from app.models.job import Job, JobStatus
from app.models.login_session import LoginSession
from app.models.personal_env import PersonalEnvVar
from app.models.sandbox_config import SandboxConfig
from app.models.sandbox_removal import SandboxRemoval
from app.models.session import BindingState, SandboxSession
from app.models.skill import InstalledSkill, InstallStatus, SkillCatalogEntry
from app.models.skill_image import (
    EventKind,
    SkillImageLease,
    SkillInstallEvent,
    SkillSnapshot,
    SnapshotState,
    SnapshotTrigger,
)
from app.models.tenant import ROLE_ORDER, Membership, Role, Tenant
from app.models.terminal import TerminalTicket
from app.models.user import User
from app.models.warm_pool import PoolSandbox, PoolState, WarmPool

__all__ = [
    "ROLE_ORDER", "ApiKey", "AuditEvent", "EgressAccessRequest", "EgressEvent", "ExecRun",
    "RunStatus", "Invitation",
    "InvitationStatus", "Job", "JobStatus",
    "LoginSession", "Membership", "PersonalEnvVar", "Role",
    "BindingState", "SandboxConfig", "SandboxRemoval", "SandboxSession", "Tenant", "User",
    "InstallStatus", "InstalledSkill", "SkillCatalogEntry", "EventKind", "SkillImageLease",
    "SkillInstallEvent", "SkillSnapshot", "SnapshotState", "SnapshotTrigger",
    "TerminalTicket", "PoolSandbox", "PoolState", "WarmPool",
]
