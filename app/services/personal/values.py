"""Members' own variables (reference 8, decisions 9): validation, writes, listing, cascades.

Identity is always the authenticated principal, passed in as a `Who`; no caller of this
module can name another member. Values are encrypted at rest and never leave this module
except through the resolver (`env_resolver`), into a sandbox's environment.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, delete, func, select, type_coerce, update

from app.errors import BadRequest, NotFound
from app.extensions import db
from app.models import InstalledSkill, InstallStatus, PersonalEnvVar, SandboxConfig, Tenant, User
from app.models.personal_env import CONFIG_WIDE, PRINCIPAL_USER
from app.models.types import utcnow
from app.security.crypto import SecretsUnavailable, crypto

NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
NAME_HINT = "Capital letters, digits and _, not starting with a digit, at most 128 characters."
RESERVED = frozenset({
    "PATH", "HOME", "USER", "SHELL", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH",
    "PYTHONHOME", "NODE_OPTIONS", "WEKNORA_SKILL_OUTPUT_DIR", "WEKNORA_SESSION_INPUT_DIR",
    "WEKNORA_SKILL_HISTORY_ROOT", "WEKNORA_SKILL_DIR", "NODE_PATH"})
VALUE_MAX_BYTES = 8192
NAMES_PER_SCOPE = 50


@dataclass(frozen=True)
class Who:
    """The caller's identity: tenant plus principal (type, id), never from a request body."""

    tenant_id: int
    principal_type: str
    principal_id: str

    @classmethod
    def user(cls, tenant: Tenant, user: User) -> Who:
        return cls(tenant.id, PRINCIPAL_USER, str(user.id))

    def rows(self):
        return select(PersonalEnvVar).where(
            PersonalEnvVar.tenant_id == self.tenant_id,
            PersonalEnvVar.principal_type == self.principal_type,
            PersonalEnvVar.principal_id == self.principal_id)


# -- validation ---------------------------------------------------------------------------

def check_name(raw: str, *, sandbox_scope: bool) -> str:
    """The trimmed name, or a 400 saying which rule it breaks (reference 8.2, decisions 9)."""
    name = raw.strip()
    if not NAME_RE.match(name):
        raise BadRequest(f"invalid variable name {name[:64]!r}: {NAME_HINT}")
    if name in RESERVED or name.startswith("WEKNORA_SKILL_"):
        raise BadRequest(f"{name} is reserved and cannot be set")
    if sandbox_scope and name.startswith("WEKNORA_"):
        raise BadRequest(f"{name} is reserved: WEKNORA_* names cannot be set sandbox-wide")
    return name


def check_value(name: str, value: str | None) -> str:
    if not value:
        raise BadRequest(f"a value is required; delete {name} to clear it")
    if len(value.encode()) > VALUE_MAX_BYTES:
        raise BadRequest(f"the value of {name} is longer than {VALUE_MAX_BYTES} bytes")
    return value


def usable(skill: InstalledSkill) -> bool:
    return (skill.enabled and skill.status == InstallStatus.ready
            and skill.deleted_at is None)


def declared(skill: InstalledSkill) -> list[dict[str, Any]]:
    return [e for e in skill.envs or [] if isinstance(e, dict) and e.get("name")]


def _skill_in_tenant(who: Who, skill_id: str) -> InstalledSkill | None:
    skill = db.session.get(InstalledSkill, skill_id)
    if skill is None or skill.tenant_id != who.tenant_id or skill.deleted_at is not None:
        return None
    return skill


def _live_config(who: Who, config_id: str) -> SandboxConfig | None:
    config = db.session.get(SandboxConfig, config_id)
    if config is None or config.tenant_id != who.tenant_id or config.deleted_at is not None:
        return None
    return config


# -- writes -------------------------------------------------------------------------------

def set_skill_value(who: Who, skill_id: str, raw_name: str, value: str | None) -> None:
    """Store the caller's value for a name the skill declares; the config is the skill's."""
    name = check_name(raw_name, sandbox_scope=False)
    check_value(name, value)
    skill = _skill_in_tenant(who, skill_id)
    if skill is None or not usable(skill):
        raise BadRequest(f"skill {skill_id[:64]} is not available in this workspace")
    if name not in {e["name"] for e in declared(skill)}:
        raise BadRequest(f"skill {skill.name} does not declare {name}")
    _upsert(who, skill.sandbox_config_id, skill.id, name, value or "")


def set_config_value(who: Who, config_id: str, raw_name: str, value: str | None) -> None:
    """Store the caller's config-wide value (every run on that config sees it)."""
    name = check_name(raw_name, sandbox_scope=True)
    check_value(name, value)
    if _live_config(who, config_id) is None:
        raise BadRequest(f"sandbox config {config_id[:64]} is not available in this workspace")
    _upsert(who, config_id, CONFIG_WIDE, name, value or "")


def _upsert(who: Who, config_id: str, skill_id: str, name: str, value: str) -> None:
    scope = who.rows().where(PersonalEnvVar.sandbox_config_id == config_id,
                             PersonalEnvVar.skill_id == skill_id)
    # Only the id: the old value may no longer decrypt, and re-entry must still work.
    row_id = db.session.scalar(scope.with_only_columns(PersonalEnvVar.id)
                               .where(PersonalEnvVar.name == name))
    if row_id is not None:  # an overwrite is exempt from the quota, so a key can be rotated
        db.session.execute(update(PersonalEnvVar).where(PersonalEnvVar.id == row_id)
                           .values(value=value, updated_at=utcnow()))
        db.session.commit()
        return
    count = db.session.scalar(select(func.count()).select_from(scope.subquery()))
    if count >= NAMES_PER_SCOPE:
        raise BadRequest(f"at most {NAMES_PER_SCOPE} variables per scope; delete one first")
    db.session.add(PersonalEnvVar(
        id=str(uuid.uuid4()), tenant_id=who.tenant_id, principal_type=who.principal_type,
        principal_id=who.principal_id, sandbox_config_id=config_id, skill_id=skill_id,
        name=name, value=value))
    db.session.commit()


def delete_skill_value(who: Who, skill_id: str, raw_name: str) -> None:
    """Remove the caller's own value; works on a disabled or failed skill too (revocation)."""
    skill = _skill_in_tenant(who, skill_id)
    if skill is None:
        raise NotFound("this environment variable is not set")
    _delete(who, skill.sandbox_config_id, skill.id, raw_name.strip())


def delete_config_value(who: Who, config_id: str, raw_name: str) -> None:
    _delete(who, config_id, CONFIG_WIDE, raw_name.strip())


def _delete(who: Who, config_id: str, skill_id: str, name: str) -> None:
    result = db.session.execute(delete(PersonalEnvVar).where(
        PersonalEnvVar.tenant_id == who.tenant_id,
        PersonalEnvVar.principal_type == who.principal_type,
        PersonalEnvVar.principal_id == who.principal_id,
        PersonalEnvVar.sandbox_config_id == config_id, PersonalEnvVar.skill_id == skill_id,
        PersonalEnvVar.name == name))
    if result.rowcount == 0:
        db.session.rollback()
        raise NotFound("this environment variable is not set")
    db.session.commit()


# -- cascades (decisions 9) ---------------------------------------------------------------

def members_with_values(skill_id: str) -> int:
    """How many members (or keys) keep personal values for an installed skill: what an
    uninstall deletes with it, told before it is confirmed."""
    holders = select(PersonalEnvVar.principal_type, PersonalEnvVar.principal_id).where(
        PersonalEnvVar.skill_id == skill_id).distinct().subquery()
    return int(db.session.scalar(select(func.count()).select_from(holders)) or 0)


def forget_skill(skill_id: str) -> None:
    """Delete every member's values scoped to an installed skill that is going away."""
    db.session.execute(delete(PersonalEnvVar).where(PersonalEnvVar.skill_id == skill_id))


def forget_config(config_id: str) -> None:
    """Delete every member's values scoped to a sandbox config that is going away."""
    db.session.execute(delete(PersonalEnvVar).where(
        PersonalEnvVar.sandbox_config_id == config_id))


def forget_principal(who: Who) -> int:
    """Delete every value `who` stored in their tenant (a member leaving); joins the
    caller's transaction and returns how many rows went."""
    result = db.session.execute(delete(PersonalEnvVar).where(
        PersonalEnvVar.tenant_id == who.tenant_id,
        PersonalEnvVar.principal_type == who.principal_type,
        PersonalEnvVar.principal_id == who.principal_id))
    return result.rowcount or 0


# -- reading ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stored:
    """One of the caller's rows: the plaintext, or None when it no longer decrypts."""

    sandbox_config_id: str
    skill_id: str
    name: str
    value: str | None
    updated_at: Any


def read_own(who: Who, config_ids: list[str] | None = None,
             skill_ids: tuple[str, ...] | None = None) -> list[Stored]:
    """The caller's rows in one statement. A token that no longer decrypts (its key was
    rotated away) comes back with value None instead of failing the whole read."""
    query = select(PersonalEnvVar.sandbox_config_id, PersonalEnvVar.skill_id,
                   PersonalEnvVar.name, type_coerce(PersonalEnvVar.value, Text),
                   PersonalEnvVar.updated_at).where(
        PersonalEnvVar.tenant_id == who.tenant_id,
        PersonalEnvVar.principal_type == who.principal_type,
        PersonalEnvVar.principal_id == who.principal_id)
    if config_ids is not None:
        query = query.where(PersonalEnvVar.sandbox_config_id.in_(config_ids))
    if skill_ids is not None:
        query = query.where(PersonalEnvVar.skill_id.in_(skill_ids))
    return [Stored(c, s, n, _decrypt(token), at)
            for c, s, n, token, at in db.session.execute(query)]


def _decrypt(token: str) -> str | None:
    try:
        return crypto().decrypt(token)
    except SecretsUnavailable:
        return None


def list_groups(who: Who) -> list[dict[str, Any]]:
    """GET /me/env-vars (reference 8.3): every live config of the workspace, its usable
    skills that declare variables, and the caller's own config-wide values. Three reads."""
    configs = list(db.session.scalars(select(SandboxConfig).where(
        SandboxConfig.tenant_id == who.tenant_id, SandboxConfig.deleted_at.is_(None))
        .order_by(SandboxConfig.name, SandboxConfig.id)))
    skills = [s for s in db.session.scalars(select(InstalledSkill).where(
        InstalledSkill.tenant_id == who.tenant_id, InstalledSkill.deleted_at.is_(None),
        InstalledSkill.enabled.is_(True), InstalledSkill.status == InstallStatus.ready)
        .order_by(InstalledSkill.name, InstalledSkill.id)) if declared(s)]
    own = {(r.sandbox_config_id, r.skill_id, r.name): r for r in read_own(who)}
    return [_group(config, [s for s in skills if s.sandbox_config_id == config.id], own)
            for config in configs]


def _group(config: SandboxConfig, skills: list[InstalledSkill],
           own: dict[tuple[str, str, str], Stored]) -> dict[str, Any]:
    wide = sorted((r for r in own.values()
                   if r.sandbox_config_id == config.id and r.skill_id == CONFIG_WIDE),
                  key=lambda r: r.name)
    return {
        "sandbox_config_id": config.id, "sandbox_config_name": config.name,
        "description": config.description or None,
        "vars": [_view(r.name, None, None, False, r) for r in wide],
        "skills": [{
            "skill_id": s.id, "skill_name": s.name, "description": s.description or None,
            "vars": [_view(e["name"], e.get("description") or None, bool(e.get("required")),
                           bool((s.env_values or {}).get(e["name"])),
                           own.get((config.id, s.id, e["name"])))
                     for e in declared(s)],
        } for s in skills],
    }


def _view(name: str, description: str | None, required: bool | None, workspace: bool,
          stored: Stored | None) -> dict[str, Any]:
    mine = stored is not None and bool(stored.value)
    view: dict[str, Any] = {"name": name, "description": description, "required": required,
                            "source": "user" if mine else "workspace" if workspace else "unset",
                            "needs_reentry": stored is not None and stored.value is None,
                            "updated_at": stored.updated_at if stored is not None else None}
    return view
