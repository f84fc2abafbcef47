"""Sessions and execution: one persistent sandbox per session (reference 9.1-9.2, decisions 7).

The first exec creates the sandbox; later ones reuse it. How a session finds, resumes,
replaces or creates its sandbox (the binding) is app.services.sessions.binding.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, update

from app.backends.base import (
    Backend,
    BackendError,
    ExecResult,
    SandboxNotFound,
    SandboxStale,
)
from app.backends.sandbox_paths import OUTPUT_DIR
from app.errors import Forbidden, NotFound, ValidationFailed
from app.extensions import db
from app.models import BindingState, SandboxConfig, SandboxSession, Tenant, User
from app.models.types import utcnow
from app.services import audit, paging, quotas
from app.services.personal import capture as exec_capture
from app.services.personal import resolver
from app.services.personal.values import Who
from app.services.sandboxes import document, endpoints, incidents, pools
from app.services.sandboxes.configs import cordoned
from app.services.sandboxes.document import readable_env
from app.services.sandboxes.provider import backend_for
from app.services.sessions import binding as session_binding
from app.services.sessions.run_output import LiveHooks
from app.services.skills import runtime as skill_exec
from app.tenancy import owned_or_404

log = logging.getLogger("sandlot.sessions")
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
    egress_denied: list[dict] | None = None  # [{host, port, count}] the gateway refused
    new_files: int | None = None  # files a run created or changed in /workspace/output


# -- sessions -----------------------------------------------------------------------------

def create_session(tenant: Tenant, user: User, config_id: str, title: str = "") -> SandboxSession:
    if "\0" in title:
        raise ValidationFailed.one("title", "must not contain NUL")
    config = live_config(tenant.id, config_id)
    endpoints.require_backend(config.config)
    session = SandboxSession(id=str(uuid.uuid4()), tenant_id=tenant.id, user_id=user.id,
                             sandbox_config_id=config.id, title=title.strip()[:200],
                             binding_state=BindingState.none)
    db.session.add(session)
    pools.saw_session(config)  # its warm pool, if any, is wanted for the next hour
    audit.record(tenant, MemberActor(user), "session.created", "session", session.id,
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
    with provider_errors(config, "ending a session"):
        destroy_sandboxes(session)
    audit.record(tenant, MemberActor(user), "session.deleted", "session", session.id)
    pools.session_ended(session.id)
    db.session.delete(session)
    db.session.commit()


def destroy_sandboxes(session: SandboxSession) -> None:
    """Delete the session's sandbox and any it lost track of; raises BackendError."""
    config = db.session.get(SandboxConfig, session.sandbox_config_id)
    if config is None:
        return
    backend = _backend(session, config.config)
    for sandbox in backend.list(session_binding.session_filter(session)):
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
    resolution: resolver.Resolution
    timeout: int
    keep_processes: bool = False  # what the command leaves running outlives it (Docker)


def precheck(tenant: Tenant, user: User, session: SandboxSession, command: str,
             timeout_sec: int | None, skill: str | None) -> Prepared:
    """Every refusal `exec_command` would give before touching the sandbox; what it read."""
    config, _, resolution = _prepare(tenant, user, session, command, timeout_sec, skill)
    return Prepared(config.id, Who.user(tenant, user), skill, resolution,
                    exec_timeout(config.config, timeout_sec))


def _prepare(tenant: Tenant, user: User, session: SandboxSession, command: str,
             timeout_sec: int | None, skill: str | None
             ) -> tuple[SandboxConfig, Any, resolver.Resolution]:
    _check_command(command, timeout_sec)
    if tenant.scripts_disabled:
        raise Forbidden("Script execution is turned off for this workspace.",
                        code="workspace_scripts_disabled")
    config = live_config(tenant.id, session.sandbox_config_id)
    if config.is_cordoned(utcnow()):
        raise cordoned()
    endpoints.require_backend(config.config)
    if session.binding_state in (BindingState.none, BindingState.gone):
        # Refused before a run is recorded; the create checks again while it holds the
        # session's claim (a gone sandbox is replaced only when its member starts one).
        quotas.admit_sandbox(tenant, session, config.config, document.memory_mb,
                             pooled=pools.has_ready(config))
    who = Who.user(tenant, user)
    installed = skill_exec.usable_skill(config, skill) if skill else None
    # The caller's layers (reference 8.4); unreadable values refuse the run here.
    baked = frozenset(k for k, v in readable_env(config.config).items() if v)
    resolution = resolver.resolve(who, config.id, installed, baked)
    if installed is not None and resolution.missing:
        raise resolver.refuse_missing(installed.name, resolution.missing)
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
    with provider_errors(config, "stopping a command"):
        backend = _backend(session, config.config)
        if hasattr(backend, "cancel_exec"):
            backend.cancel_exec(session.sandbox_id, ref)


def exec_command(tenant: Tenant, user: User, session: SandboxSession, command: str,
                 timeout_sec: int | None = None, skill: str | None = None,
                 live: LiveHooks | None = None) -> ExecOutcome:
    """Run `command` in the session's sandbox, creating or resuming it first.

    With `skill`, the command runs in that installed skill's directory with the skill
    runtime names (reference 9.3) in its environment. With `live` (a run), a backend
    that can report output as it comes and stop a command does so (app.services.sessions.runs).
    """
    prepared = precheck(tenant, user, session, command, timeout_sec, skill)
    return exec_prepared(session, command, prepared, live=live, looked=False)


def exec_prepared(session: SandboxSession, command: str, prepared: Prepared,
                  live: LiveHooks | None = None, looked: bool = True) -> ExecOutcome:
    """`exec_command` after its checks (`precheck`, moments ago): a run's thread. The
    config is read again (this thread's own row, to build the backend and bind); with
    `looked`, `session` was read just now by this thread and is not refreshed first."""
    config = live_config(prepared.who.tenant_id, prepared.config_id)
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
    if live is not None:  # a run: say whether it left files in /workspace/output
        exec_args["new_files_in"] = OUTPUT_DIR
    if prepared.keep_processes and doc["sandbox_type"] == "docker":
        exec_args["keep_processes"] = True  # E2B and Cube never end what a command left
    with provider_errors(config, "running a command"):
        backend = _backend(session, doc)
        sandbox_id, reused = session_binding.ensure_sandbox(session, config, backend,
                                                            looked=looked)
        exec_args.update(_hooks(backend, live))
        # End the read transaction: no pooled database connection is held for as long
        # as the command runs (50 long runs would otherwise need 50 connections).
        db.session.commit()
        try:
            result = backend.exec(sandbox_id, run, **exec_args)
        except SandboxStale:  # a recent look no longer held: look again (resume/replace)
            sandbox_id, reused = session_binding.ensure_sandbox(session, config, backend)
            result = backend.exec(sandbox_id, run, **exec_args)
        except SandboxNotFound:  # it went between the look and the exec (decisions 17)
            raise session_binding.gone(session, sandbox_id) from None
        if capture_to is not None and installed is not None:
            skill_exec.capture(backend, sandbox_id, who, installed, capture_to, result)
    # The session's last_used_at/exec_count are written by the caller (a run) in the
    # same commit as the run's verdict: `touch`.
    return dataclasses.replace(_outcome(result, sandbox_id, reused),
                               missing_env=resolution.missing if installed else None)


def start_sandbox(tenant: Tenant, user: User, session: SandboxSession) -> None:
    """Create (or resume) the session's sandbox without running a command: for a terminal
    or files before the first command, and the member's new sandbox after theirs went
    (decisions 17). The same checks and quotas as a command's."""
    precheck(tenant, user, session, "sh", None, None)
    session_binding.start_again(session)
    config = live_config(tenant.id, session.sandbox_config_id)
    with provider_errors(config, "starting the sandbox"):
        backend = _backend(session, config.config)
        try:
            session_binding.ensure_sandbox(session, config, backend)
        finally:
            backend.close()
    audit.record(tenant, MemberActor(user), "session.sandbox_started", "session", session.id)
    db.session.commit()


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


def touch(conn: Connection, session_id: str) -> None:
    """Count one exec on the session and mark it used, inside the caller's transaction."""
    conn.execute(update(SandboxSession).where(SandboxSession.id == session_id).values(
        last_used_at=utcnow(), exec_count=SandboxSession.exec_count + 1))


# -- helpers ------------------------------------------------------------------------------

def _backend(session: SandboxSession, doc: dict[str, Any]) -> Backend:
    return backend_for(doc, session.sandbox_id, session.traffic_token)


def live_config(tenant_id: int, config_id: str) -> SandboxConfig:
    return owned_or_404(SandboxConfig, config_id, tenant_id,
                        "No such sandbox config in this workspace.")


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
                       result.timed_out, result.truncated, sandbox_id, reused,
                       egress_denied=[dict(d) for d in result.egress_denied],
                       new_files=result.new_files)


@contextmanager
def provider_errors(config: SandboxConfig | None, what: str) -> Iterator[None]:
    """Backend failures become 503 `unavailable`: a sentence and a reference id for the
    member; the reason goes to the log and the config's admins under that id."""
    try:
        yield
    except BackendError as exc:
        db.session.rollback()
        raise incidents.provider_failed(exc, config, what) from exc


class MemberActor:
    """A member as the activity log names them (services take the actor as data)."""

    def __init__(self, user: User):
        self.actor_id = user.id
        self.actor_label = user.email


