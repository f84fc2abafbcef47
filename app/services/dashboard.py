"""The workspace at a glance (issue 15 item 6): configs by backend with their last check,
sessions, skills and installs that failed or are under way, recent activity.

Every part is one aggregate or one bounded list, so the dashboard sends the same number
of SQL statements whether the workspace has one config or a thousand."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, literal, select, union_all
from sqlalchemy.sql import ColumnElement

from app.extensions import db
from app.models import (
    AuditEvent,
    InstalledSkill,
    InstallStatus,
    Job,
    JobStatus,
    SandboxConfig,
    SandboxSession,
    SkillCatalogEntry,
    Tenant,
    User,
)
from app.models.session import BindingState
from app.services import audit
from app.services.sandboxes import pools
from app.services.sandboxes.check.job import JOB_KIND as CHECK_KIND
from app.services.sandboxes.document import BACKENDS

LIST_SIZE = 6
OUTCOMES = ("passed", "problems", "checking", "unfinished", "never")
SHOWN_INSTALLS = (InstallStatus.failed, InstallStatus.installing, InstallStatus.removing)


@dataclass(frozen=True)
class CheckedConfig:
    id: str
    name: str
    backend: str
    outcome: str  # one of OUTCOMES
    check_id: str | None
    checked_at: datetime | None


@dataclass(frozen=True)
class SessionLine:
    id: str
    title: str
    config_id: str
    config_name: str
    user_id: int
    email: str
    running: bool  # a sandbox is bound to it now
    last_used_at: datetime | None


@dataclass(frozen=True)
class InstallLine:
    id: str
    name: str
    config_id: str
    config_name: str
    status: InstallStatus
    since: datetime


@dataclass
class Summary:
    # backend -> outcome -> count; backends with no config are absent
    configs: dict[str, dict[str, int]] = field(default_factory=dict)
    checks: list[CheckedConfig] = field(default_factory=list)
    sessions_open: int = 0
    sessions_running: int = 0
    sessions: list[SessionLine] = field(default_factory=list)
    skills: int = 0
    installs: dict[str, int] = field(default_factory=dict)  # status -> count
    attention: list[InstallLine] = field(default_factory=list)
    recent: list[AuditEvent] = field(default_factory=list)
    pools: list[pools.PoolStatus] = field(default_factory=list)

    @property
    def config_total(self) -> int:
        return sum(sum(outcomes.values()) for outcomes in self.configs.values())


def summarise(tenant: Tenant, user: User, everyone: bool) -> Summary:
    """What the dashboard shows `user`; `everyone` (admins) lists all members' sessions,
    others see only their own (a session is private to its member)."""
    summary = Summary()
    summary.configs = _configs_by_backend(tenant)
    summary.checks = _latest_checks(tenant)
    summary.sessions_open, summary.sessions_running = _session_counts(tenant)
    summary.sessions = _recent_sessions(tenant, None if everyone else user.id)
    summary.skills, summary.installs = _skill_counts(tenant)
    summary.attention = _installs_needing_attention(tenant)
    summary.recent = audit.list_recent(tenant, 8)
    summary.pools = pools.status(tenant.id)
    return summary


def _last_check(tenant: Tenant, config_ids: list[str] | None = None):
    """Each config's newest check job: ranked per config, only rank 1 kept, so the join
    with the configs meets one row per config (materialised once, not per config)."""
    rank = func.row_number().over(partition_by=Job.target_id,
                                  order_by=(Job.created_at.desc(), Job.id.desc()))
    ranked = (select(Job.target_id, Job.id, Job.status,
                     Job.result["ok"].as_boolean().label("ok"), Job.created_at,
                     rank.label("rank"))
              .where(Job.tenant_id == tenant.id, Job.kind == CHECK_KIND,
                     Job.target_type == "sandbox_config",
                     *([Job.target_id.in_(config_ids)] if config_ids is not None else []))
              .subquery())
    return select(ranked).where(ranked.c.rank == 1).subquery()


def _outcome(last) -> ColumnElement[str]:
    running = (JobStatus.pending, JobStatus.running)
    return case(
        (last.c.status.in_(running), "checking"),
        (and_(last.c.status == JobStatus.succeeded, last.c.ok.is_(True)), "passed"),
        (last.c.status == JobStatus.succeeded, "problems"),
        else_="unfinished",
    )


def _live_configs(tenant: Tenant) -> tuple[ColumnElement[bool], ...]:
    return SandboxConfig.tenant_id == tenant.id, SandboxConfig.deleted_at.is_(None)


def _checked(tenant: Tenant, *columns, config_ids: list[str] | None = None):
    """`columns` of each live config that has a check (of `config_ids`, when given), with
    its outcome.

    The join runs from the checks to the configs (a primary-key lookup per check): the
    other way round, SQLite scans every check for every config."""
    last = _last_check(tenant, config_ids)
    outcome = _outcome(last).label("outcome")
    query = (select(*columns, outcome, last.c.id.label("check_id"),
                    last.c.created_at.label("checked_at"))
             .select_from(last).join(SandboxConfig, SandboxConfig.id == last.c.target_id)
             .where(*_live_configs(tenant)))
    return query, outcome, last


def _configs_by_backend(tenant: Tenant) -> dict[str, dict[str, int]]:
    """Per backend, how many configs and how their last check went, in one statement: the
    checked configs by outcome, and every config as a total (never checked = the rest)."""
    checked, outcome, _ = _checked(tenant, SandboxConfig.sandbox_type)
    checked = (checked.with_only_columns(SandboxConfig.sandbox_type, outcome, func.count())
               .group_by(SandboxConfig.sandbox_type, outcome))
    totals = (select(SandboxConfig.sandbox_type, literal("total"), func.count())
              .where(*_live_configs(tenant)).group_by(SandboxConfig.sandbox_type))
    found: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    totals_by_backend: dict[str, int] = {}
    for backend, result, count in db.session.execute(union_all(checked, totals)):
        if result == "total":
            totals_by_backend[backend] = count
        else:
            found[backend][result] += count
    for backend, total in totals_by_backend.items():
        found[backend]["never"] = total - sum(found[backend].values())
    return {backend: found[backend] for backend in BACKENDS if backend in totals_by_backend}


_CHECKED = (SandboxConfig.id, SandboxConfig.name, SandboxConfig.sandbox_type)


def _latest_checks(tenant: Tenant) -> list[CheckedConfig]:
    """The configs checked most recently, newest first."""
    query, _, last = _checked(tenant, *_CHECKED)
    query = query.order_by(last.c.created_at.desc(), SandboxConfig.name).limit(LIST_SIZE)
    return [_checked_config(row) for row in db.session.execute(query)]


def last_checks(tenant: Tenant, config_ids: list[str]) -> dict[str, CheckedConfig]:
    """The newest check of each of these configs that has one (the Sandboxes cards)."""
    if not config_ids:
        return {}
    query, _, _ = _checked(tenant, *_CHECKED, config_ids=config_ids)
    return {row.id: _checked_config(row) for row in db.session.execute(query)}


def _checked_config(row) -> CheckedConfig:
    return CheckedConfig(row.id, row.name, row.sandbox_type, row.outcome, row.check_id,
                         row.checked_at)


def _session_counts(tenant: Tenant) -> tuple[int, int]:
    running = func.count(case((SandboxSession.binding_state == BindingState.bound, 1)))
    row = db.session.execute(select(func.count(), running).where(
        SandboxSession.tenant_id == tenant.id)).one()
    return row[0] or 0, row[1] or 0


def _recent_sessions(tenant: Tenant, user_id: int | None) -> list[SessionLine]:
    query = (select(SandboxSession.id, SandboxSession.title, SandboxConfig.id,
                    SandboxConfig.name, User.id, User.email, SandboxSession.binding_state,
                    SandboxSession.last_used_at)
             .join(SandboxConfig, SandboxConfig.id == SandboxSession.sandbox_config_id)
             .join(User, User.id == SandboxSession.user_id)
             .where(SandboxSession.tenant_id == tenant.id)
             .order_by(func.coalesce(SandboxSession.last_used_at,
                                     SandboxSession.created_at).desc(), SandboxSession.id)
             .limit(LIST_SIZE))
    if user_id is not None:
        query = query.where(SandboxSession.user_id == user_id)
    return [SessionLine(r[0], r[1], r[2], r[3], r[4], r[5], r[6] == BindingState.bound, r[7])
            for r in db.session.execute(query)]


def _skill_counts(tenant: Tenant) -> tuple[int, dict[str, int]]:
    """Catalog skills, and installs by status, in one statement (always one row)."""
    catalog = (select(func.count()).select_from(SkillCatalogEntry)
               .where(SkillCatalogEntry.tenant_id == tenant.id,
                      SkillCatalogEntry.deleted_at.is_(None)).scalar_subquery())
    per_status = [func.count(case((InstalledSkill.status == status, 1)))
                  for status in InstallStatus]
    query = (select(catalog, *per_status).select_from(InstalledSkill)
             .where(InstalledSkill.tenant_id == tenant.id, InstalledSkill.deleted_at.is_(None)))
    row = db.session.execute(query).one()
    return row[0] or 0, {status.value: row[i + 1] or 0 for i, status in enumerate(InstallStatus)}


def _installs_needing_attention(tenant: Tenant) -> list[InstallLine]:
    """Failed installs and those under way (installing, removing), newest change first."""
    query = (select(InstalledSkill.id, InstalledSkill.name, SandboxConfig.id, SandboxConfig.name,
                    InstalledSkill.status, InstalledSkill.updated_at)
             .join(SandboxConfig, SandboxConfig.id == InstalledSkill.sandbox_config_id)
             .where(InstalledSkill.tenant_id == tenant.id, InstalledSkill.deleted_at.is_(None),
                    InstalledSkill.status.in_(SHOWN_INSTALLS))
             .order_by(InstalledSkill.updated_at.desc(), InstalledSkill.id).limit(LIST_SIZE))
    return [InstallLine(r[0], r[1], r[2], r[3], InstallStatus(r[4]), r[5])
            for r in db.session.execute(query)]


def outcome_counts(summary: Summary) -> dict[str, Any]:
    """Outcomes summed over every backend (the headline of the configs card)."""
    totals = dict.fromkeys(OUTCOMES, 0)
    for outcomes in summary.configs.values():
        for outcome, count in outcomes.items():
            totals[outcome] += count
    return totals
