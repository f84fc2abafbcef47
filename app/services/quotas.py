"""Quotas on what holds shared capacity (issue 22 item 3), counted in the database so
every web process and worker sees the same use.

Each quota has a deployment default (a setting) that the operator may override for one
workspace (`flask quotas set`, stored on the tenant). A session's sandbox counts while
the session holds it, paused or not, until the session ends. The memory budget is the
deployment's: the sum of the memory limits of every live Docker sandbox, whoever's.
Past a quota the answer is 429 `quota_exceeded` naming the quota, its limit and the use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import func, select

from app.errors import AppError
from app.extensions import db
from app.models import (
    BindingState,
    InstalledSkill,
    InstallStatus,
    PoolSandbox,
    PoolState,
    SandboxConfig,
    SandboxSession,
    SkillSnapshot,
    SnapshotState,
    Tenant,
)


@dataclass(frozen=True)
class Quota:
    name: str
    setting: str
    label: str  # what a person reads: "live sandboxes per member"
    advice: str  # how to get under it


QUOTAS = {q.name: q for q in (
    Quota("live_sandboxes_per_member", "QUOTA_LIVE_SANDBOXES_PER_MEMBER",
          "live sandboxes per member", "End one of your sessions to free one."),
    Quota("live_sandboxes_per_workspace", "QUOTA_LIVE_SANDBOXES_PER_WORKSPACE",
          "live sandboxes per workspace", "An admin can end sessions from a config's "
          "inventory."),
    Quota("sandbox_configs_per_workspace", "QUOTA_SANDBOX_CONFIGS_PER_WORKSPACE",
          "sandbox configs per workspace", "Delete a config you no longer use."),
    Quota("concurrent_installs_per_workspace", "QUOTA_CONCURRENT_INSTALLS_PER_WORKSPACE",
          "skill installs running at once per workspace", "Wait for one to finish."),
    Quota("skill_image_mb_per_workspace", "QUOTA_SKILL_IMAGE_MB_PER_WORKSPACE",
          "MB of skill images per workspace", "Uninstall skills you no longer use; the "
          "images they replaced are released after their retention."),
    Quota("warm_sandboxes_per_workspace", "QUOTA_WARM_SANDBOXES_PER_WORKSPACE",
          "warm pool sandboxes per workspace", "Lower the warm pool of a config."),
)}
LIVE = (BindingState.bound, BindingState.creating)
MB = 1_000_000  # sizes people read, as `df -H` and the providers count them


class OverQuota(AppError):
    code, status, message = "quota_exceeded", 429, "A quota of this workspace is reached."

    @classmethod
    def of(cls, name: str, limit: int, used: int, sentence: str) -> OverQuota:
        return cls(sentence, data={"quota": name, "limit": limit, "used": used})


def limit(tenant: Tenant, name: str) -> int:
    """The workspace's limit: the operator's override for it, else the deployment's."""
    override = (tenant.quotas or {}).get(name)
    return int(override if override is not None
               else current_app.config[QUOTAS[name].setting])


def _refuse_past(tenant: Tenant, name: str, used: int) -> None:
    allowed = limit(tenant, name)
    if used >= allowed:
        quota = QUOTAS[name]
        raise OverQuota.of(name, allowed, used, f"This is past the quota of {allowed} "
                           f"{quota.label} ({used} in use). {quota.advice}")


# -- what is in use (each a count query; `usage` asks them all in one statement) ---------

def _live_sandboxes(tenant_id: int, user_id: int | None = None, besides: str | None = None):
    query = select(func.count()).select_from(SandboxSession).where(
        SandboxSession.tenant_id == tenant_id, SandboxSession.binding_state.in_(LIVE),
        SandboxSession.id != (besides or ""))
    return query if user_id is None else query.where(SandboxSession.user_id == user_id)


def _warm_sandboxes(tenant_id: int):
    """Warm pool sandboxes waiting (or starting) for the workspace's next sessions."""
    return select(func.count()).select_from(PoolSandbox).where(
        PoolSandbox.tenant_id == tenant_id, PoolSandbox.state != PoolState.claimed)


def _live_configs(tenant_id: int):
    return select(func.count()).select_from(SandboxConfig).where(
        SandboxConfig.tenant_id == tenant_id, SandboxConfig.deleted_at.is_(None))


def _running_installs(tenant_id: int):
    return select(func.count()).select_from(InstalledSkill).where(
        InstalledSkill.tenant_id == tenant_id, InstalledSkill.deleted_at.is_(None),
        InstalledSkill.status.in_((InstallStatus.installing, InstallStatus.removing)))


def _image_mb(tenant_id: int):
    """What the workspace's skill snapshots still on the provider add up to, in MB."""
    return select(func.coalesce(func.sum(SkillSnapshot.size_bytes), 0) / MB).where(
        SkillSnapshot.tenant_id == tenant_id, SkillSnapshot.state.in_(
            (SnapshotState.building, SnapshotState.active, SnapshotState.superseded)))


def _count(query) -> int:
    return int(db.session.scalar(query) or 0)


def reserved_memory_mb(memory_of: Callable[[dict], int], besides: str | None = None) -> int:
    """The memory limits (`memory_of` a config document) of every live Docker session
    sandbox on this deployment."""
    rows = db.session.execute(select(SandboxConfig.config).join(
        SandboxSession, SandboxSession.sandbox_config_id == SandboxConfig.id).where(
        SandboxSession.binding_state.in_(LIVE), SandboxSession.id != (besides or ""),
        SandboxConfig.sandbox_type == "docker"))
    # Warm pool sandboxes not claimed yet hold theirs too (a claimed one is its session's).
    pooled = db.session.execute(select(SandboxConfig.config).join(
        PoolSandbox, PoolSandbox.config_id == SandboxConfig.id).where(
        PoolSandbox.state != PoolState.claimed))
    return sum(memory_of(doc) for (doc,) in rows) + sum(memory_of(doc) for (doc,) in pooled)


# -- the checks ----------------------------------------------------------------------------

def admit_sandbox(tenant: Tenant, session: SandboxSession, doc: dict,
                  memory_of: Callable[[dict], int], pooled: bool = False) -> None:
    """Before a session's sandbox is created (the session holds its claim, so two creates
    at once both count each other and neither passes a full quota). `pooled`: it will be
    a warm pool sandbox, whose memory the budget already counts."""
    _refuse_past(tenant, "live_sandboxes_per_member",
                 _count(_live_sandboxes(tenant.id, session.user_id, besides=session.id)))
    _refuse_past(tenant, "live_sandboxes_per_workspace",
                 _count(_live_sandboxes(tenant.id, besides=session.id)))
    budget = int(current_app.config.get("SANDBOX_MEMORY_BUDGET_MB") or 0)
    needs = 0 if pooled else memory_of(doc)
    if budget and needs:
        reserved = reserved_memory_mb(memory_of, besides=session.id)
        if reserved + needs > budget:
            raise OverQuota.of("memory_budget_mb", budget, reserved, (
                f"This deployment's sandboxes hold {reserved} of its {budget} MB memory "
                f"budget, and this one needs {needs} MB. Try again when sessions have "
                "ended, or lower the config's memory limit."))


def admit_warm_sandbox(tenant: Tenant, counted: bool = True) -> None:
    """Before a warm pool sandbox is started; `counted`: its own row is in the count."""
    used = _count(_warm_sandboxes(tenant.id)) - (1 if counted else 0)
    _refuse_past(tenant, "warm_sandboxes_per_workspace", used)


def admit_config(tenant: Tenant) -> None:
    _refuse_past(tenant, "sandbox_configs_per_workspace", _count(_live_configs(tenant.id)))


def admit_install(tenant: Tenant) -> None:
    _refuse_past(tenant, "concurrent_installs_per_workspace",
                 _count(_running_installs(tenant.id)))


def admit_image_bytes(tenant: Tenant, added: int) -> None:
    """Before a skill snapshot of `added` bytes is committed."""
    allowed, used = limit(tenant, "skill_image_mb_per_workspace"), _count(_image_mb(tenant.id))
    if used + added / MB > allowed:
        quota = QUOTAS["skill_image_mb_per_workspace"]
        raise OverQuota.of(quota.name, allowed, used, (
            f"This install would add {added // MB} MB to this workspace's skill images, "
            f"past its quota of {allowed} {quota.label} ({used} MB in use). {quota.advice}"))


def usage(tenant: Tenant, user_id: int | None = None) -> list[dict]:
    """Each quota of the workspace with its limit and use (the dashboard and the CLI); the
    per-member one counts `user_id`'s sandboxes (None without a member)."""
    queries = {"live_sandboxes_per_member": _live_sandboxes(tenant.id, user_id or 0),
               "live_sandboxes_per_workspace": _live_sandboxes(tenant.id),
               "sandbox_configs_per_workspace": _live_configs(tenant.id),
               "concurrent_installs_per_workspace": _running_installs(tenant.id),
               "skill_image_mb_per_workspace": _image_mb(tenant.id),
               "warm_sandboxes_per_workspace": _warm_sandboxes(tenant.id)}
    row = db.session.execute(select(*(q.scalar_subquery().label(name)
                                      for name, q in queries.items()))).one()
    used = {name: int(getattr(row, name) or 0) for name in queries}
    if user_id is None:
        used["live_sandboxes_per_member"] = None
    return [{"name": q.name, "label": q.label, "limit": limit(tenant, q.name),
             "used": used[q.name], "overridden": q.name in (tenant.quotas or {}),
             "default": int(current_app.config[q.setting])}
            for q in QUOTAS.values()]


# The deployment's own limits, the same for every workspace: (setting, what it bounds).
DEPLOYMENT_LIMITS = (
    ("SANDBOX_MEMORY_BUDGET_MB", "MB of memory for all live Docker sandboxes together"),
    ("SKILL_IMAGE_ADD_MAX_MB", "MB one install may add to a config's image"),
    ("SKILL_INSTALL_DISK_MB", "MB of disk an install's commands get"),
    ("SKILL_INSTALL_COMMANDS_SEC", "seconds an install's commands get together"),
    ("STREAMS_PER_MEMBER", "live streams one member may hold open"),
    ("STREAMS_PER_WORKSPACE", "live streams one workspace may hold open"),
    ("TERMINALS_PER_MEMBER", "web terminals one member may have open (5 per session)"),
    ("TERMINALS_PER_WORKSPACE", "web terminals one workspace may have open"),
    ("RUNS_PER_MEMBER", "commands one member may have running at once"),
    ("RUNS_PER_TENANT_MAX", "commands one workspace may have running at once"),
    ("FILE_TRANSFERS_PER_MEMBER", "file uploads and downloads one member may run at once"),
    ("FILE_TRANSFERS_PER_WORKSPACE", "file uploads and downloads one workspace may run at once"),
)


def deployment_limits() -> list[dict]:
    return [{"setting": setting, "label": label, "value": int(current_app.config[setting])}
            for setting, label in DEPLOYMENT_LIMITS]


def set_override(tenant: Tenant, name: str, value: int | None) -> None:
    """The operator's limit for one workspace (None: back to the deployment's)."""
    if name not in QUOTAS:
        raise ValueError(f"unknown quota {name!r}; one of: {', '.join(QUOTAS)}")
    if value is not None and value < 0:
        raise ValueError("a quota is a whole number, 0 or more")
    overrides = dict(tenant.quotas or {})
    if value is None:
        overrides.pop(name, None)
    else:
        overrides[name] = value
    tenant.quotas = overrides
    db.session.commit()
