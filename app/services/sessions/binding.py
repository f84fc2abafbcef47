"""A session's sandbox binding: find, resume, replace or create it (reference 9.1, decisions 7).

Split from app.services.sessions.lifecycle (the exec path) along the binding seam. The first exec
creates the sandbox; later ones reuse it. A paused sandbox (TTL expiry) is resumed, a
stopped one replaced, a lost binding recovered by listing the provider by metadata.
A sandbox missing on its engine is gone (decisions 17): the session says so until its
member starts a new one, and a host whose engine of the recorded name is another engine
never touches it.
Creation is serialised per session without row locks: a request must win a conditional
UPDATE (`none` -> `creating`) before it may create, so two concurrent first execs create
exactly one sandbox on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import InvalidRequestError

from app.backends.base import (
    Backend,
    BackendError,
    SandboxHeldElsewhere,
    SandboxNotFound,
    SandboxSpec,
    SandboxState,
)
from app.errors import Conflict, NotFound, Unavailable
from app.extensions import db
from app.models import BindingState, SandboxConfig, SandboxSession, Tenant
from app.models.types import utcnow
from app.services import quotas
from app.services.sandboxes import document, endpoints, pools
from app.services.sandboxes import image as skill_image
from app.services.sandboxes.provider import backend_for, labels

log = logging.getLogger("sandlot.sessions")
CLAIM_EXPIRY = timedelta(seconds=180)  # a creator that died frees its claim after this
WAIT_FOR_CREATOR_SEC = 150


class SandboxGone(Conflict):
    code = "sandbox_gone"
    message = ("This session's sandbox is gone: the engine that ran it no longer has it "
               "(it was removed or expired), and its files went with it. Start a new "
               "sandbox for this session to run commands again.")


# Why a sandbox is out of this server's reach (409, by code): the words after "This
# session's sandbox ... “engine” ..." and what to do about it.
ELSEWHERE = {
    "sandbox_on_other_engine": (
        "is on the Docker engine \u201c{engine}\u201d of another host, and this server "
        "reaches a different engine under that name, so it can neither use nor replace it "
        "here. Open the session through the host that runs that engine, or ask an admin."),
    "sandbox_on_other_host": (
        "on the Docker engine \u201c{engine}\u201d is paused, and the network policy it "
        "was created with is kept by the Sandlot host that started it, so this server will "
        "not resume it. Open the session through that host, or end this session and open "
        "a new one."),
}


class SandboxElsewhere(Conflict):
    def __init__(self, code: str, engine: str):
        super().__init__("This session's sandbox " + ELSEWHERE[code].format(engine=engine),
                         code=code)


def ensure_sandbox(session: SandboxSession, config: SandboxConfig, backend: Backend,
                   looked: bool = False) -> tuple[str, bool]:
    """The id of a running sandbox for `session`, and whether it already existed
    (`looked`: the caller read `session` just now, so the first refresh is skipped)."""
    endpoints.require_backend(config.config)  # runs accepted before the operator's change
    deadline = time.monotonic() + WAIT_FOR_CREATOR_SEC
    while time.monotonic() < deadline:
        try:
            if not looked:
                db.session.refresh(session)
            looked = False
        except InvalidRequestError:  # its row is gone: ended meanwhile (member or admin)
            raise NotFound("No such session.") from None
        if session.binding_state == BindingState.gone:
            raise SandboxGone()
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
    require_same_engine(session, backend)  # before anything that would replace it
    if session.stale or (_generation(config) > session.skill_generation and _rebuilds(config)):
        _discard(session, backend)
        return None
    try:  # a look the engine's backend took moments ago will do (SandboxStale if wrong)
        info = getattr(backend, "get_recent", backend.get)(sandbox_id)
    except SandboxNotFound:
        raise gone(session, sandbox_id) from None
    if info.state == SandboxState.running:
        return sandbox_id
    if info.state == SandboxState.paused:
        _resume(session, backend, sandbox_id)
        return sandbox_id
    if info.state == SandboxState.transitioning:
        time.sleep(0.2)
        return None
    _discard(session, backend)
    return None


def bound_sandbox(session: SandboxSession, backend: Backend) -> str | None:
    """The session's sandbox as it is, running (resumed if paused), or None when it has
    none now. Never creates, replaces or discards one: the session's files are looked at
    where they are, even in a sandbox the next command would replace."""
    if session.binding_state == BindingState.gone:
        raise SandboxGone()
    if session.binding_state != BindingState.bound or not session.sandbox_id:
        return None
    require_same_engine(session, backend)
    sandbox_id = session.sandbox_id
    try:
        info = backend.get(sandbox_id)
    except SandboxNotFound:
        raise gone(session, sandbox_id) from None
    if info.state == SandboxState.paused:
        _resume(session, backend, sandbox_id)
    elif info.state != SandboxState.running:
        return None
    return sandbox_id


def _create_claimed(session: SandboxSession, config: SandboxConfig, backend: Backend) -> str:
    """We hold the claim: adopt a sandbox the provider still has for us, or create one."""
    try:
        found = [s for s in backend.list(session_filter(session))
                 if s.state in (SandboxState.running, SandboxState.paused)]
        if found:
            keep, *extra = sorted(found, key=lambda s: s.started_at or "", reverse=True)
            for sandbox in extra:
                backend.delete(sandbox.id)
            if keep.state == SandboxState.paused:
                _resume(session, backend, keep.id)
            version = int(keep.metadata.get("sandlot_binding_version") or 0)
            _bind(session, keep.id, version, config, policy=None, backend=backend)
            return keep.id
        tenant = db.session.get(Tenant, session.tenant_id)
        version = session.binding_version + 1
        pooled = _from_pool(session, config, backend, tenant)
        if pooled is not None:
            return pooled
        quotas.admit_sandbox(tenant, session, config.config, document.memory_mb)
        spec = session_spec(session, config, version)
        info = backend.create(spec)
    except BaseException:
        unbind(session)  # give the claim back so the next request can try again
        raise
    if not _bind(session, info.id, version, config, policy=document.policy_summary(spec.network),
                 backend=backend, traffic_token=info.traffic_token):
        # Ended (by its member or an admin) while we created it: nobody else knows of
        # this sandbox, so it goes now rather than being left running.
        backend.delete(info.id)
        raise NotFound("No such session.")
    return info.id


def _from_pool(session: SandboxSession, config: SandboxConfig, backend: Backend,
               tenant: Tenant) -> str | None:
    """A running warm pool sandbox of `config`, bound to `session` (issue 29 item 2), or
    None when its pool has none to give. The member's quotas apply as to a create; the
    memory is the pool's already."""
    identity = getattr(backend, "engine_identity", None)
    for _ in range(3):
        row = pools.claim(config, session, identity() if identity is not None else None)
        if row is None:
            return None
        try:
            quotas.admit_sandbox(tenant, session, config.config, document.memory_mb,
                                 pooled=True)
        except BaseException:
            pools.give_back(row)
            raise
        try:
            state = backend.get(row.sandbox_id or "").state
        except SandboxNotFound:
            state = None
        if state != SandboxState.running:  # stopped or removed while it waited
            pools.let_go(row)
            continue
        if not _bind(session, row.sandbox_id, session.binding_version + 1, config,
                     policy=row.policy, backend=backend):
            pools.let_go(row)  # ended meanwhile: the keeper removes the sandbox
            raise NotFound("No such session.")
        return row.sandbox_id
    return None


def session_spec(session: SandboxSession, config: SandboxConfig, version: int) -> SandboxSpec:
    """The config's spec, booting from its skill snapshot when it has one built under the
    current identity (reference 9.1 step 5), so installed skills are there."""
    doc = config.config
    spec = document.spec_for(doc, labels(
        session.tenant_id, session_id=session.id, binding_version=version,
        provider=doc["sandbox_type"], config_id=config.id, purpose="session"),
        name=config.name)
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
          policy: dict[str, Any] | None, backend: Backend,
          traffic_token: str | None = None) -> bool:
    """Record the binding, and the engine that holds it; False when the session was
    ended meanwhile."""
    identity = getattr(backend, "engine_identity", None)
    values: dict[str, Any] = {
        "binding_state": BindingState.bound, "sandbox_id": sandbox_id, "traffic_token": None,
        "binding_version": version, "provider": config.config["sandbox_type"],
        "sandbox_created_at": utcnow(), "claimed_at": None, "stale": False,
        "skill_generation": _generation(config),
        "engine": (endpoints.engine_of(config.config.get("docker") or {})
                   if identity is not None else None),
        "engine_uid": identity() if identity is not None else None}
    if policy is not None:
        values["policy"] = policy
    if traffic_token is not None:
        values["traffic_token"] = traffic_token
    result = db.session.execute(update(SandboxSession).where(SandboxSession.id == session.id)
                                .values(**values))
    db.session.commit()
    return result.rowcount == 1


def unbind(session: SandboxSession) -> None:
    db.session.rollback()
    db.session.execute(update(SandboxSession).where(SandboxSession.id == session.id).values(
        binding_state=BindingState.none, sandbox_id=None, claimed_at=None, traffic_token=None))
    db.session.commit()


def _resume(session: SandboxSession, backend: Backend, sandbox_id: str) -> None:
    try:
        backend.connect(sandbox_id)
    except SandboxHeldElsewhere:
        raise SandboxElsewhere("sandbox_on_other_host", session.engine or "unnamed") from None


def require_same_engine(session: SandboxSession, backend: Backend) -> None:
    """Refuse to use (or replace) a sandbox recorded on another engine than the one this
    process reaches under the session's engine name (two hosts' `local` engines)."""
    identity = getattr(backend, "engine_identity", None)
    if session.engine_uid and identity is not None and identity() != session.engine_uid:
        raise SandboxElsewhere("sandbox_on_other_engine", session.engine or "unnamed")


def gone(session: SandboxSession, missing: str | None) -> SandboxGone:
    """Mark the session's sandbox `missing` gone (it is not on its own engine) and return
    the error that says so; a binding another request changed meanwhile is left as it is."""
    db.session.rollback()
    db.session.execute(update(SandboxSession).where(
        SandboxSession.id == session.id, SandboxSession.binding_state == BindingState.bound,
        SandboxSession.sandbox_id == missing).values(
        binding_state=BindingState.gone, sandbox_id=None, claimed_at=None, traffic_token=None))
    db.session.commit()
    return SandboxGone()


def start_again(session: SandboxSession) -> None:
    """The member asked for a new sandbox after theirs went: the next start creates one."""
    db.session.execute(update(SandboxSession).where(
        SandboxSession.id == session.id, SandboxSession.binding_state == BindingState.gone)
        .values(binding_state=BindingState.none))
    db.session.commit()
    db.session.refresh(session)


def _discard(session: SandboxSession, backend: Backend) -> None:
    if session.sandbox_id:
        backend.delete(session.sandbox_id)
    unbind(session)


def session_filter(session: SandboxSession) -> dict[str, str]:
    return labels(session.tenant_id, session_id=session.id, config_id=session.sandbox_config_id)


def _generation(config: SandboxConfig) -> int:
    return skill_image.generation(config.config)


def _rebuilds(config: SandboxConfig) -> bool:
    """Skill rollout `next_turn` rebuilds on next use; `new_session` only for new sessions."""
    return config.config.get("skill_rollout") != "new_session"
