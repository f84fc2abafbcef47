"""Per-exec resolution of a run's variables (reference 8.4, decisions 7) and capture.

Layers, each overwriting the one before: the admin's workspace values of the skill's
declarations, the caller's config-wide values, the caller's values for that skill. The
config's own `env_vars` sit underneath as the sandbox's environment (baked at creation).

If the caller's values cannot be read, resolution fails and nothing runs: running with
the workspace's (someone else's) key is worse than not running. One statement reads the
caller's layers whatever their size; the skill row (layer 1) is loaded by the caller.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError

from app.errors import AppError, BadRequest, Conflict, Unavailable
from app.extensions import db
from app.models import InstalledSkill, PersonalEnvVar
from app.models.personal_env import CONFIG_WIDE
from app.services.personal import values as personal_env
from app.services.personal.values import Who

log = logging.getLogger("sandlot.personal_env")


@dataclass(frozen=True)
class Resolution:
    env: dict[str, str]
    missing: list[str] = field(default_factory=list)
    # Declared names with a value in neither the workspace nor the caller's layers.
    capturable: list[str] = field(default_factory=list)


def resolve(who: Who, config_id: str, skill: InstalledSkill | None,
            baked: frozenset[str] = frozenset()) -> Resolution:
    """The environment of one run for the caller; raises when their values are unreadable.

    With no skill (a plain exec) only the caller's config-wide layer applies. `baked`: the
    names the config's `env_vars` give the sandbox itself; they satisfy a required name
    and are never captured (the value is there already), nor added to the run again."""
    declared = personal_env.declared(skill) if skill is not None else []
    names = {e["name"] for e in declared}
    admin = skill.env_values or {} if skill is not None else {}
    env = {k: v for k, v in admin.items() if k in names and v}
    scopes = (CONFIG_WIDE, skill.id) if skill is not None else (CONFIG_WIDE,)
    try:
        own = personal_env.read_own(who, [config_id], scopes)
    except SQLAlchemyError as exc:
        db.session.rollback()
        log.warning("reading personal variables failed: %s", type(exc).__name__)
        raise Unavailable("Your personal variables could not be read, so the command was not "
                          "run; try again.", code="personal_env_unreadable") from None
    unreadable = sorted({r.name for r in own if r.value is None})
    if unreadable:
        raise Conflict(f"Your value for {', '.join(unreadable)} can no longer be read, so the "
                       "command was not run; set it again under Personal variables.",
                       code="personal_env_needs_reentry", data={"names": unreadable})
    for scope in scopes:  # config-wide first, then the skill's own: later wins
        env.update({r.name: r.value for r in own if r.skill_id == scope and r.value})
    unset = [n for n in (e["name"] for e in declared) if not env.get(n) and n not in baked]
    missing = [e["name"] for e in declared if e.get("required") and e["name"] in unset]
    capturable = unset
    return Resolution(env, missing, capturable)


def refuse_missing(skill_name: str, missing: list[str]) -> AppError:
    return BadRequest(f"Skill {skill_name} needs {', '.join(missing)}: set "
                      f"{'it' if len(missing) == 1 else 'them'} under Personal variables "
                      "(or ask an admin for a workspace value) and run it again.",
                      code="missing_env", data={"missing_env": missing})


def capture(who: Who, skill: InstalledSkill, found: dict[str, str]) -> list[str]:
    """Store values a successful run exported for declared names as the caller's own, only
    where neither the workspace nor the caller has one: never overwrite (a stray
    `export KEY=test` must not break a working credential). Returns the names stored."""
    names = {e["name"] for e in personal_env.declared(skill)}
    admin = {k for k, v in (skill.env_values or {}).items() if v}
    present = set(db.session.scalars(who.rows().with_only_columns(PersonalEnvVar.name).where(
        PersonalEnvVar.sandbox_config_id == skill.sandbox_config_id,
        PersonalEnvVar.skill_id.in_((CONFIG_WIDE, skill.id)))))
    stored = []
    for name, value in sorted(found.items()):
        if name not in names or name in admin or name in present or not value:
            continue
        if len(value.encode()) > personal_env.VALUE_MAX_BYTES:
            continue
        db.session.add(PersonalEnvVar(
            id=str(uuid.uuid4()), tenant_id=who.tenant_id, principal_type=who.principal_type,
            principal_id=who.principal_id, sandbox_config_id=skill.sandbox_config_id,
            skill_id=skill.id, name=name, value=value))
        stored.append(name)
    if stored:
        db.session.commit()
    return stored
