"""Sessions and execution: one persistent sandbox per session (reference 9.1-9.2, decisions 7).

The first exec creates the sandbox; later ones reuse it. A paused sandbox (TTL expiry)
is resumed, a dead one replaced, a lost binding recovered by listing the provider by
metadata. Creation is serialised per session without row locks: a request must win a
conditional UPDATE (`none` -> `creating`) before it may create, so two concurrent first
execs create exactly one sandbox on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, or_, select, update
from sqlalchemy.exc import InvalidRequestError

from app.backends.base import (
    Backend,
    BackendError,
    ExecResult,
    SandboxNotFound,
    SandboxSpec,
    SandboxStale,
    SandboxState,
)
from app.errors import Forbidden, NotFound, Unavailable, ValidationFailed
from app.extensions import db
from app.models import BindingState, SandboxConfig, SandboxSession, Tenant, User
from app.models.types import utcnow
from app.services import (
    audit,
    env_resolver,
    exec_capture,
    incidents,
    paging,
    sandbox_doc,
    skill_exec,
)
from app.services.installs import image as skill_image
from app.services.personal_env import Who
from app.services.run_output import LiveHooks
from app.services.sandbox_configs import backend_for, cordoned

log = logging.getLogger("sandlot.sessions")
CLAIM_EXPIRY = timedelta(seconds=180)  # a creator that died frees its claim after this
WAIT_FOR_CREATOR_SEC = 150
OUTPUT_LIMIT = 256 * 1024
COMMAND_MAX = 16 * 1024
TIMEOUT_MAX = 600
DEFAULT_EXEC_TIMEOUT = 60


@dataclass(frozen=True)
class ExecOutcome:
    stdout: str
    stderr: str
    exit_code: int
    duration_ms: int
    timed_out: bool
    truncated: bool
    sandbox_id: str
    reused: bool
    missing_env: list[str] | None = None


# -- sessions -----------------------------------------------------------------------------

def create_session(tenant: Tenant, user: User, config_id: str, title: str = "") -> SandboxSession:
    if "\0" in title:
        raise ValidationFailed.one("title", "must not contain NUL")
    config = _live_config(tenant.id, config_id)
    session = SandboxSession(id=str(uuid.uuid4()), tenant_id=tenant.id, user_id=user.id,
                             sandbox_config_id=config.id, title=title.strip()[:200],
                             binding_state=BindingState.none)
    db.session.add(session)
    audit.record(tenant, _Actor(user), "session.created", "session", session.id,
                 {"sandbox_config_id": config.id})
    db.session.commit()
    return session


def list_sessions(tenant: Tenant, user: User) -> list[SandboxSession]:
    query = (select(SandboxSession)
             .where(SandboxSession.tenant_id == tenant.id, SandboxSession.user_id == user.id)
             .order_by(SandboxSession.created_at.desc()))
    return list(db.session.scalars(query))


def sessions_page(tenant: Tenant, user: User,
                  window: paging.Window) -> paging.Slice[SandboxSession]:
    """One page of the caller's own sessions, newest first."""
    query = select(SandboxSession).where(SandboxSession.tenant_id == tenant.id,
                                         SandboxSession.user_id == user.id)
    return paging.keyset(query, (SandboxSession.created_at, SandboxSession.id), window,
                         desc=True)


def get_session(tenant: Tenant, user: User, session_id: str) -> SandboxSession:
    """The caller's own session; anyone else's is a 404, never a 403."""
    session = db.session.get(SandboxSession, session_id)
    if session is None or session.tenant_id != tenant.id or session.user_id != user.id:
        raise NotFound("No such session.")
    return session


def delete_session(tenant: Tenant, user: User, session: SandboxSession) -> None:
    """Destroy the session's sandbox (and any it lost track of), then the session."""
    config = db.session.get(SandboxConfig, session.sandbox_config_id)
    with _provider(config, "ending a session"):
        destroy_sandboxes(session)
    audit.record(tenant, _Actor(user), "session.deleted", "session", session.id)
    db.session.delete(session)
    db.session.commit()


def destroy_sandboxes(session: SandboxSession) -> None:
    """Delete the session's sandbox and any it lost track of; raises BackendError."""
    config = db.session.get(SandboxConfig, session.sandbox_config_id)
    if config is None:
        return
    backend = _backend(session, config.config)
    for sandbox in backend.list(_session_filter(session)):
        backend.delete(sandbox.id)
    if session.sandbox_id:
        backend.delete(session.sandbox_id)


# -- execution ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Prepared:
    """What an exec's checks read (plain values, safe to hand to another thread): a run's
    thread executes with it instead of reading the config, the caller and their personal
    variables a second time moments after the request did."""

    config_id: str
    who: Who
    skill: str | None
    resolution: env_resolver.Resolution
    timeout: int


def precheck(tenant: Tenant, user: User, session: SandboxSession, command: str,
             timeout_sec: int | None, skill: str | None) -> Prepared:
    """Every refusal `exec_command` would give before touching the sandbox; what it read."""
    config, _, resolution = _prepare(tenant, user, session, command, timeout_sec, skill)
    return Prepared(config.id, Who.user(tenant, user), skill, resolution,
                    exec_timeout(config.config, timeout_sec))


def _prepare(tenant: Tenant, user: User, session: SandboxSession, command: str,
             timeout_sec: int | None, skill: str | None
             ) -> tuple[SandboxConfig, Any, env_resolver.Resolution]:
    _check_command(command, timeout_sec)
    if tenant.scripts_disabled:
        raise Forbidden("Script execution is turned off for this workspace.",
                        code="workspace_scripts_disabled")
    config = _live_config(tenant.id, session.sandbox_config_id)
    if config.is_cordoned(utcnow()):
        raise cordoned()
    who = Who.user(tenant, user)
    installed = skill_exec.usable_skill(config, skill) if skill else None
    # The caller's layers (reference 8.4); unreadable values refuse the run here.
    resolution = env_resolver.resolve(who, config.id, installed)
    if installed is not None and resolution.missing:
        raise env_resolver.refuse_missing(installed.name, resolution.missing)
    return config, installed, resolution


def config_doc(session: SandboxSession) -> dict[str, Any]:
    config = db.session.get(SandboxConfig, session.sandbox_config_id)
    return config.config if config is not None else {}


def can_cancel(session: SandboxSession) -> bool:
    """Whether the session's provider can stop a running command (each backend's
    cancel_exec: Docker from the host, E2B and Cube through envd's kill)."""
    return config_doc(session).get("sandbox_type") in ("docker", "e2b", "cube")


def cancel_exec(session: SandboxSession, ref: str) -> None:
    """Kill a running exec of the session's sandbox and all it started."""
    config = db.session.get(SandboxConfig, session.sandbox_config_id)
    if config is None or not session.sandbox_id:
        return
    with _provider(config, "stopping a command"):
        backend = _backend(session, config.config)
        if hasattr(backend, "cancel_exec"):
            backend.cancel_exec(session.sandbox_id, ref)


def exec_command(tenant: Tenant, user: User, session: SandboxSession, command: str,
                 timeout_sec: int | None = None, skill: str | None = None,
                 live: LiveHooks | None = None) -> ExecOutcome:
    """Run `command` in the session's sandbox, creating or resuming it first.

    With `skill`, the command runs in that installed skill's directory with the skill
    runtime names (reference 9.3) in its environment. With `live` (a run), a backend
    that can report output as it comes and stop a command does so (app.services.runs).
    """
    prepared = precheck(tenant, user, session, command, timeout_sec, skill)
    return exec_prepared(session, command, prepared, live=live, looked=False)


def exec_prepared(session: SandboxSession, command: str, prepared: Prepared,
                  live: LiveHooks | None = None, looked: bool = True) -> ExecOutcome:
    """`exec_command` after its checks (`precheck`, moments ago): a run's thread. The
    config is read again (this thread's own row, to build the backend and bind); with
    `looked`, `session` was read just now by this thread and is not refreshed first."""
    config = _live_config(prepared.who.tenant_id, prepared.config_id)
    installed = skill_exec.usable_skill(config, prepared.skill) if prepared.skill else None
    doc, resolution, who = config.config, prepared.resolution, prepared.who
    env, cwd = dict(resolution.env), None
    if live is not None:  # what a run masks in the output it stores: every env value
        live.secrets = (*env.values(), *(str(v) for v in (doc.get("env_vars") or {}).values()))
    run, capture_to = command, None
    if installed is not None:
        runtime, cwd = skill_exec.skill_runtime(installed)
        env.update(runtime)
        if resolution.capturable:
            capture_to = exec_capture.capture_dir()
            run = exec_capture.wrap(command, resolution.capturable, capture_to)
    exec_args = {"cwd": cwd, "env": env, "timeout_sec": prepared.timeout,
                 "output_limit": OUTPUT_LIMIT}
    with _provider(config, "running a command"):
        backend = _backend(session, doc)
        sandbox_id, reused = ensure_sandbox(session, config, backend, looked=looked)
        exec_args.update(_hooks(backend, live))
        # End the read transaction: no pooled database connection is held for as long
        # as the command runs (50 long runs would otherwise need 50 connections).
        db.session.commit()
        try:
            result = backend.exec(sandbox_id, run, **exec_args)
        except SandboxStale:  # a recent look no longer held: look again (resume/replace)
            sandbox_id, reused = ensure_sandbox(session, config, backend)
            result = backend.exec(sandbox_id, run, **exec_args)
        except SandboxNotFound:  # it died between the check and the exec: replace it once
            _unbind(session)
            sandbox_id, reused = ensure_sandbox(session, config, backend)
            result = backend.exec(sandbox_id, run, **exec_args)
        if capture_to is not None and installed is not None:
            skill_exec.capture(backend, sandbox_id, who, installed, capture_to, result)
    # The session's last_used_at/exec_count are written by the caller (a run) in the
    # same commit as the run's verdict: `touch`.
    return dataclasses.replace(_outcome(result, sandbox_id, reused),
                               missing_env=resolution.missing if installed else None)


def exec_timeout(doc: dict[str, Any], timeout_sec: int | None) -> int:
    """The asked timeout, else the config's default, else 60 s; never past TIMEOUT_MAX
    (a config saved before the cap existed may still say 86400)."""
    return min(timeout_sec or doc.get("default_timeout_sec") or DEFAULT_EXEC_TIMEOUT,
               TIMEOUT_MAX)


def _hooks(backend: Backend, live: LiveHooks | None) -> dict[str, Any]:
    """Live reporting for backends that can stop a running command (cancel_exec)."""
    if live is None or not hasattr(backend, "cancel_exec"):
        return {}
    return {"on_output": live.on_output, "on_started": live.on_started}


def ensure_sandbox(session: SandboxSession, config: SandboxConfig, backend: Backend,
                   looked: bool = False) -> tuple[str, bool]:
    """The id of a running sandbox for `session`, and whether it already existed
    (`looked`: the caller read `session` just now, so the first refresh is skipped)."""
    deadline = time.monotonic() + WAIT_FOR_CREATOR_SEC
    while time.monotonic() < deadline:
        try:
            if not looked:
                db.session.refresh(session)
            looked = False
        except InvalidRequestError:  # its row is gone: ended meanwhile (member or admin)
            raise NotFound("No such session.") from None
        if session.binding_state == BindingState.bound:
            sandbox_id = _usable(session, config, backend)
            if sandbox_id:
                return sandbox_id, True
            continue
        if _claim(session):
            return _create_claimed(session, config, backend), False
        time.sleep(0.1)  # another request is creating it; wait for its binding
    raise Unavailable("The sandbox for this session is still being created; try again.")


def _usable(session: SandboxSession, config: SandboxConfig, backend: Backend) -> str | None:
    """The bound sandbox, resumed if paused; None after unbinding a dead or stale one."""
    sandbox_id = session.sandbox_id or ""
    if session.stale or (_generation(config) > session.skill_generation and _rebuilds(config)):
        _discard(session, backend)
        return None
    try:  # a look the engine's backend took moments ago will do (SandboxStale if wrong)
        info = getattr(backend, "get_recent", backend.get)(sandbox_id)
    except SandboxNotFound:
        _unbind(session)
        return None
    if info.state == SandboxState.running:
        return sandbox_id
    if info.state == SandboxState.paused:
        backend.connect(sandbox_id)
        return sandbox_id
    if info.state == SandboxState.transitioning:
        time.sleep(0.2)
        return None
    _discard(session, backend)
    return None


def _create_claimed(session: SandboxSession, config: SandboxConfig, backend: Backend) -> str:
    """We hold the claim: adopt a sandbox the provider still has for us, or create one."""
    try:
        found = [s for s in backend.list(_session_filter(session))
                 if s.state in (SandboxState.running, SandboxState.paused)]
        if found:
            keep, *extra = sorted(found, key=lambda s: s.started_at or "", reverse=True)
            for sandbox in extra:
                backend.delete(sandbox.id)
            if keep.state == SandboxState.paused:
                backend.connect(keep.id)
            version = int(keep.metadata.get("sandlot_binding_version") or 0)
            _bind(session, keep.id, version, config, policy=None)
            return keep.id
        version = session.binding_version + 1
        spec = session_spec(session, config, version)
        info = backend.create(spec)
    except BaseException:
        _unbind(session)  # give the claim back so the next request can try again
        raise
    if not _bind(session, info.id, version, config, policy=_policy_summary(spec),
                 traffic_token=info.traffic_token):
        # Ended (by its member or an admin) while we created it: nobody else knows of
        # this sandbox, so it goes now rather than being left running.
        backend.delete(info.id)
        raise NotFound("No such session.")
    return info.id


def session_spec(session: SandboxSession, config: SandboxConfig, version: int) -> SandboxSpec:
    """The config's spec, booting from its skill snapshot when it has one built under the
    current identity (reference 9.1 step 5), so installed skills are there."""
    doc = config.config
    spec = sandbox_doc.spec_for(doc, {
        "sandlot_tenant_id": str(session.tenant_id), "sandlot_session_id": session.id,
        "sandlot_binding_version": str(version), "sandlot_provider": doc["sandbox_type"],
        "sandlot_sandbox_config_id": config.id, "sandlot_purpose": "session",
    })
    return dataclasses.replace(spec, template=skill_image.boot_template(doc))


def pause_idle(now=None) -> int:
    """Pause bound Docker sandboxes idle past their TTL (E2B/Cube pause themselves)."""
    now = now or utcnow()
    paused = 0
    rows = db.session.scalars(select(SandboxSession).where(
        SandboxSession.binding_state == BindingState.bound,
        SandboxSession.provider == "docker"))
    for session in list(rows):
        config = db.session.get(SandboxConfig, session.sandbox_config_id)
        if config is None or config.deleted_at is not None:
            continue
        ttl = session_spec(session, config, session.binding_version).timeout_sec
        last = session.last_used_at or session.sandbox_created_at
        if last and now - last > timedelta(seconds=ttl):
            try:
                backend = backend_for(config.config)
                if backend.get(session.sandbox_id).state == SandboxState.running:
                    backend.pause(session.sandbox_id)
                    paused += 1
            except BackendError as exc:
                log.warning("pausing idle sandbox of session %s failed: %s", session.id,
                            exc.reason)
    return paused


# -- binding transitions ------------------------------------------------------------------

def _claim(session: SandboxSession) -> bool:
    now = utcnow()
    result = db.session.execute(
        update(SandboxSession).where(
            SandboxSession.id == session.id,
            or_(SandboxSession.binding_state == BindingState.none,
                (SandboxSession.binding_state == BindingState.creating)
                & (SandboxSession.claimed_at < now - CLAIM_EXPIRY)))
        .values(binding_state=BindingState.creating, claimed_at=now))
    db.session.commit()
    return result.rowcount == 1


def _bind(session: SandboxSession, sandbox_id: str, version: int, config: SandboxConfig,
          policy: dict[str, Any] | None, traffic_token: str | None = None) -> bool:
    """Record the binding; False when the session was ended meanwhile."""
    values: dict[str, Any] = {
        "binding_state": BindingState.bound, "sandbox_id": sandbox_id, "traffic_token": None,
        "binding_version": version, "provider": config.config["sandbox_type"],
        "sandbox_created_at": utcnow(), "claimed_at": None, "stale": False,
        "skill_generation": _generation(config)}
    if policy is not None:
        values["policy"] = policy
    if traffic_token is not None:
        values["traffic_token"] = traffic_token
    result = db.session.execute(update(SandboxSession).where(SandboxSession.id == session.id)
                                .values(**values))
    db.session.commit()
    return result.rowcount == 1


def _unbind(session: SandboxSession) -> None:
    db.session.rollback()
    db.session.execute(update(SandboxSession).where(SandboxSession.id == session.id).values(
        binding_state=BindingState.none, sandbox_id=None, claimed_at=None, traffic_token=None))
    db.session.commit()


def _discard(session: SandboxSession, backend: Backend) -> None:
    if session.sandbox_id:
        backend.delete(session.sandbox_id)
    _unbind(session)


def touch(conn: Connection, session_id: str) -> None:
    """Count one exec on the session and mark it used, inside the caller's transaction."""
    conn.execute(update(SandboxSession).where(SandboxSession.id == session_id).values(
        last_used_at=utcnow(), exec_count=SandboxSession.exec_count + 1))


# -- helpers ------------------------------------------------------------------------------

def _backend(session: SandboxSession, doc: dict[str, Any]) -> Backend:
    return backend_for(doc, session.sandbox_id, session.traffic_token)


def _live_config(tenant_id: int, config_id: str) -> SandboxConfig:
    config = db.session.get(SandboxConfig, config_id)
    if config is None or config.tenant_id != tenant_id or config.deleted_at is not None:
        raise NotFound("No such sandbox config in this workspace.")
    return config


def _session_filter(session: SandboxSession) -> dict[str, str]:
    return {"sandlot_tenant_id": str(session.tenant_id), "sandlot_session_id": session.id,
            "sandlot_sandbox_config_id": session.sandbox_config_id}


def _generation(config: SandboxConfig) -> int:
    return skill_image.generation(config.config)


def _rebuilds(config: SandboxConfig) -> bool:
    """Skill rollout `next_turn` rebuilds on next use; `new_session` only for new sessions."""
    return config.config.get("skill_rollout") != "new_session"


def _policy_summary(spec: SandboxSpec) -> dict[str, Any]:
    """What the sandbox was created with, minus any secret (header values, inject secrets)."""
    policy = spec.network
    return {"allow_internet_access": policy.allow_internet_access,
            "allow_out": list(policy.allow_out), "deny_out": list(policy.deny_out),
            "cube_rules": len(policy.cube_rules), "e2b_host_rules": len(policy.host_rules)}


def _check_command(command: str, timeout_sec: int | None) -> None:
    errors = []
    if not command.strip():
        errors.append({"field": "command", "message": "must not be empty"})
    elif len(command) > COMMAND_MAX or "\0" in command:
        errors.append({"field": "command",
                       "message": f"at most {COMMAND_MAX} characters and no NUL"})
    if timeout_sec is not None and not 1 <= timeout_sec <= TIMEOUT_MAX:
        errors.append({"field": "timeout_sec", "message": f"between 1 and {TIMEOUT_MAX}"})
    if errors:
        raise ValidationFailed(errors)


def _outcome(result: ExecResult, sandbox_id: str, reused: bool) -> ExecOutcome:
    stdout = result.stdout
    if result.truncated:
        stdout += f"\n[output truncated: only the first {OUTPUT_LIMIT // 1024} KiB are shown]\n"
    return ExecOutcome(stdout, result.stderr, result.exit_code, result.duration_ms,
                       result.timed_out, result.truncated, sandbox_id, reused)


@contextmanager
def _provider(config: SandboxConfig | None, what: str) -> Iterator[None]:
    """Backend failures become 503 `unavailable`: a sentence and a reference id for the
    member; the reason goes to the log and the config's admins under that id."""
    try:
        yield
    except BackendError as exc:
        db.session.rollback()
        raise incidents.provider_failed(exc, config, what) from exc


class _Actor:
    def __init__(self, user: User):
        self.actor_id = user.id
        self.actor_label = user.email


