"""Warm pools (issue 29 item 2): started Docker sandboxes a config keeps ready, so a new
session's first command does not wait for a container to start.

- **Size.** A config's `docker.warm_pool_size`, bounded by the operator's
  SANDBOX_WARM_POOL_MAX (0 turns pools off). A pool is off while its config has had no
  new session for POOL_ACTIVE (an hour): the first session after that starts it again.
- **Claims.** A session that needs a sandbox takes a ready one with a conditional
  UPDATE (`ready` -> `claimed`, its session id), so two sessions never get the same one,
  on SQLite and PostgreSQL alike; it then binds it as if it had created it. Only a
  sandbox made as the config would make one now qualifies (its `fingerprint`: template,
  skill image, limits, env and network policy, engine): a policy or image change drains
  the pool. The row of a claimed sandbox stays, naming its session, until that session
  ends (Docker labels cannot change: the egress log and the inventory read the row).
- **Keepers.** Every process that owns the pool's engine (the worker beside that engine,
  or its node) runs `keep` on a thread: it drains what is no longer wanted, and refills
  one sandbox at a time. A new sandbox's row is written first (`warming`) and counted
  before the create, so keepers in several processes never overfill a pool.
- **Capacity.** Waiting sandboxes count against the deployment's memory budget
  (quotas.reserved_memory_mb), not against any member's quota: a claimed one becomes
  its session's and counts as the member's from then on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import Flask, current_app
from sqlalchemy import case, delete, exists, func, select, update
from sqlalchemy.exc import IntegrityError

from app.backends.base import Backend, BackendError, SandboxInfo, SandboxNotFound, SandboxSpec
from app.extensions import db
from app.models import (
    PoolSandbox,
    PoolState,
    SandboxConfig,
    SandboxSession,
    Tenant,
    WarmPool,
)
from app.models.types import utcnow
from app.services import jobs, quotas
from app.services.sandboxes import document, endpoints, incidents
from app.services.sandboxes import image as skill_image
from app.services.sandboxes.provider import backend_for, labels

log = logging.getLogger("sandlot.pools")
POOL_ACTIVE = timedelta(hours=1)  # without a new session for this long, a pool is off
MAX_AGE = timedelta(hours=1)  # a waiting sandbox older than this is replaced
WARMING_EXPIRY = timedelta(seconds=180)  # a keeper that died while creating frees its place
CLAIM_EXPIRY = timedelta(seconds=180)  # a claim no session bound by then is let go
RETRY_AFTER = (10, 30, 60, 300)  # seconds before the next refill after failures in a row
TEND_SEC = 2.0
ORPHAN_SWEEP_SEC = 300.0  # how often a keeper looks for pool sandboxes no row names
_swept = {"at": float("-inf")}
WAITING = (PoolState.warming, PoolState.ready)


def pool_max() -> int:
    return max(0, int(current_app.config.get("SANDBOX_WARM_POOL_MAX") or 0))


def size_of(doc: dict[str, Any]) -> int:
    """The pool a config asks for, within the operator's bound (0 when pools are off)."""
    if doc.get("sandbox_type") != "docker":
        return 0
    return min(int((doc.get("docker") or {}).get("warm_pool_size") or 0), pool_max())


def spec_of(config: SandboxConfig, pool_id: str = "") -> SandboxSpec:
    """A pool sandbox of `config` as a session of it would get one now (labels aside)."""
    doc = config.config
    spec = document.spec_for(doc, labels(
        config.tenant_id, config_id=config.id, provider="docker", purpose="pool",
        binding_version=0, pool_id=pool_id or None), name=config.name)
    return dataclasses.replace(spec, template=skill_image.boot_template(doc))


def fingerprint(config: SandboxConfig) -> str:
    """What a pool sandbox of `config` must have been created as to serve a session now."""
    spec = dataclasses.asdict(dataclasses.replace(spec_of(config), metadata={}))
    spec["engine"] = endpoints.engine_of(config.config.get("docker") or {})
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def _engine_backend(engine: str) -> Backend:
    return backend_for({"sandbox_type": "docker", "docker": {"engine": engine}})


# -- sessions ------------------------------------------------------------------------------

def saw_session(config: SandboxConfig) -> None:
    """A new session of `config`: its pool (if it has one) is wanted for the next hour.
    Joins the caller's transaction."""
    if not size_of(config.config):
        return
    jobs.ensure_housekeeping()  # the embedded worker's keeper, if it has not started yet
    now = utcnow()
    done = db.session.execute(update(WarmPool).where(WarmPool.config_id == config.id)
                              .values(last_session_at=now))
    if done.rowcount == 0:
        try:
            with db.session.begin_nested():
                db.session.add(WarmPool(config_id=config.id, tenant_id=config.tenant_id,
                                        last_session_at=now, problem="", failures=0))
        except IntegrityError:  # another request made it just now
            db.session.execute(update(WarmPool).where(WarmPool.config_id == config.id)
                               .values(last_session_at=now))


def claim(config: SandboxConfig, session: SandboxSession,
          engine_uid: str | None) -> PoolSandbox | None:
    """A ready pool sandbox of `config`, now `session`'s (or the one it claimed before
    its creator stopped); None when the pool has none that fits. Commits."""
    mine = db.session.scalar(select(PoolSandbox).where(
        PoolSandbox.session_id == session.id, PoolSandbox.state == PoolState.claimed))
    if mine is not None:
        return mine
    if not size_of(config.config):
        return None
    query = select(PoolSandbox.id).where(
        PoolSandbox.config_id == config.id, PoolSandbox.state == PoolState.ready,
        PoolSandbox.fingerprint == fingerprint(config))
    if engine_uid:
        query = query.where(PoolSandbox.engine_uid == engine_uid)
    for pool_id in db.session.scalars(query.order_by(PoolSandbox.ready_at).limit(4)).all():
        taken = db.session.execute(update(PoolSandbox).where(
            PoolSandbox.id == pool_id, PoolSandbox.state == PoolState.ready).values(
            state=PoolState.claimed, session_id=session.id, claimed_at=utcnow()))
        db.session.commit()
        if taken.rowcount == 1:
            return db.session.get(PoolSandbox, pool_id)
    return None


def has_ready(config: SandboxConfig) -> bool:
    """Whether a new session of `config` would get a warm pool sandbox now."""
    if not size_of(config.config):
        return False
    return bool(db.session.scalar(select(exists().where(
        PoolSandbox.config_id == config.id, PoolSandbox.state == PoolState.ready,
        PoolSandbox.fingerprint == fingerprint(config)))))


def give_back(row: PoolSandbox) -> None:
    """A claim its session could not use (over a quota): ready for the next session."""
    db.session.rollback()
    db.session.execute(update(PoolSandbox).where(
        PoolSandbox.id == row.id, PoolSandbox.state == PoolState.claimed).values(
        state=PoolState.ready, session_id=None, claimed_at=None))
    db.session.commit()


def let_go(row: PoolSandbox) -> None:
    """A claimed sandbox that turned out unusable (stopped, gone): the keeper removes it."""
    db.session.execute(update(PoolSandbox).where(PoolSandbox.id == row.id)
                       .values(state=PoolState.draining))
    db.session.commit()


def session_ended(session_id: str) -> None:
    """An ended session's pool sandbox is the keeper's to remove (joins the caller's
    transaction): the session's removal deletes the sandbox it bound, and this one too
    if the session claimed it but ended before binding it."""
    db.session.execute(update(PoolSandbox).where(
        PoolSandbox.session_id == session_id, PoolSandbox.state == PoolState.claimed)
        .values(state=PoolState.draining))


def sessions_of(sandboxes: list[SandboxInfo]) -> dict[str, str | None]:
    """For each pool sandbox among `sandboxes` (by id): the session that claimed it, or
    None while it waits in its pool (or is being removed)."""
    pool_ids = {s.metadata.get("sandlot_pool_id", ""): s.id for s in sandboxes
                if s.metadata.get("sandlot_purpose") == "pool"}
    pool_ids.pop("", None)
    claimed = claimed_sessions(set(pool_ids))
    return {sandbox_id: claimed.get(pool_id) for pool_id, sandbox_id in pool_ids.items()}


def claimed_sessions(pool_ids: set[str]) -> dict[str, str]:
    """Pool row id -> the session that claimed it, for `pool_ids`."""
    if not pool_ids:
        return {}
    return dict(db.session.execute(select(PoolSandbox.id, PoolSandbox.session_id).where(
        PoolSandbox.id.in_(list(pool_ids)), PoolSandbox.state == PoolState.claimed)).all())


# -- the keeper ----------------------------------------------------------------------------

def keep(app: Flask, stop: threading.Event, interval: float = TEND_SEC) -> None:
    """Tend the pools of the engines this process owns until `stop` (a daemon thread)."""
    while not stop.wait(interval):
        with app.app_context():
            try:
                tend()
            except Exception:  # noqa: BLE001 - one failed pass never stops the keeper
                log.warning("warm pool pass failed", exc_info=True)
            finally:
                db.session.remove()


def start_keeper(app: Flask, stop: threading.Event) -> threading.Thread | None:
    if "docker" not in app.config["SANDBOX_BACKENDS"]:
        return None
    thread = threading.Thread(target=keep, args=(app, stop), name="sandlot-pools", daemon=True)
    thread.start()
    return thread


def tend(now: datetime | None = None) -> None:
    """One pass over every pool of an engine this process owns: remove what is no longer
    wanted, then refill (one create at a time, for a short pass)."""
    now = now or utcnow()
    active = set(db.session.scalars(select(WarmPool.config_id).where(
        WarmPool.last_session_at > now - POOL_ACTIVE)))
    holding = set(db.session.scalars(select(PoolSandbox.config_id).where(
        PoolSandbox.state != PoolState.claimed).distinct()))
    for config_id in sorted(active | holding):
        config = db.session.get(SandboxConfig, config_id)
        if config is not None:
            _tend(config, config_id in active, now)
    _forget_claims(now)
    if time.monotonic() - _swept["at"] >= ORPHAN_SWEEP_SEC:
        _swept["at"] = time.monotonic()
        sweep_orphans()


def sweep_orphans(grace_sec: float = WARMING_EXPIRY.total_seconds(),
                  config_id: str | None = None) -> list[str]:
    """Pool sandboxes on this process's engines that no row names (their rows went with
    a workspace, or a database restore): removed once older than `grace_sec`; only those
    of `config_id` if given."""
    removed: list[str] = []
    for engine in endpoints.engines().values():
        if not endpoints.owns(engine.name):
            continue
        backend = _engine_backend(engine.name)
        try:
            found = backend.list({"sandlot_purpose": "pool", **(
                {"sandlot_sandbox_config_id": config_id} if config_id else {})})
            known = set(db.session.scalars(select(PoolSandbox.id).where(PoolSandbox.id.in_(
                [s.metadata.get("sandlot_pool_id", "") for s in found]))))
            held = set(db.session.scalars(select(SandboxSession.sandbox_id).where(
                SandboxSession.sandbox_id.in_([s.id for s in found]))))
            for sandbox in found:
                if sandbox.metadata.get("sandlot_pool_id") in known or sandbox.id in held:
                    continue
                if _age(sandbox) < grace_sec:
                    continue
                backend.delete(sandbox.id)
                removed.append(sandbox.id)
        except BackendError as exc:
            log.warning("warm pool orphan sweep of engine %s failed: %s", engine.name,
                        exc.reason)
        finally:
            backend.close()
    if removed:
        log.info("removed %d warm pool sandboxes no pool knows", len(removed))
    return removed


def _age(sandbox: SandboxInfo) -> float:
    try:
        started = datetime.fromisoformat(str(sandbox.started_at).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")  # never started, or an engine that does not say: old enough
    return (utcnow() - started).total_seconds()


def _tend(config: SandboxConfig, active: bool, now: datetime) -> None:
    doc = config.config
    live = config.deleted_at is None and doc.get("sandbox_type") == "docker"
    target = size_of(doc) if live and active else 0
    wanted = fingerprint(config) if target else ""
    engine = endpoints.engine_of(doc.get("docker") or {}) if live else ""
    rows = list(db.session.scalars(select(PoolSandbox).where(
        PoolSandbox.config_id == config.id, PoolSandbox.state != PoolState.claimed)
        .order_by(PoolSandbox.created_at, PoolSandbox.id)
        .execution_options(populate_existing=True)))  # as other processes left them
    keeping: list[PoolSandbox] = []
    for row in rows:
        if not endpoints.owns(row.engine):
            continue  # its engine's own host tends it
        stale = (row.state == PoolState.draining or row.fingerprint != wanted
                 or (row.state == PoolState.ready and row.created_at < now - MAX_AGE)
                 or (row.state == PoolState.warming and row.created_at < now - WARMING_EXPIRY))
        if stale or len(keeping) >= target:
            _drain(row)
        else:
            keeping.append(row)
    if len(keeping) < target and endpoints.owns(engine):
        pool = db.session.get(WarmPool, config.id)
        if pool is not None and (pool.retry_at is None or pool.retry_at <= now):
            _add(config, pool, target, wanted, engine)


def _add(config: SandboxConfig, pool: WarmPool, target: int, wanted: str, engine: str) -> None:
    """Create one pool sandbox, if this pool still lacks one once our row is counted."""
    row = PoolSandbox(id=str(uuid.uuid4()), tenant_id=config.tenant_id, config_id=config.id,
                      engine=engine, fingerprint=wanted, state=PoolState.warming)
    db.session.add(row)
    db.session.commit()
    ahead = db.session.scalars(select(PoolSandbox.id).where(
        PoolSandbox.config_id == config.id, PoolSandbox.state.in_(WAITING),
        PoolSandbox.fingerprint == wanted).order_by(PoolSandbox.created_at, PoolSandbox.id)
        .limit(target)).all()
    if row.id not in ahead:  # another keeper's rows fill it
        _forget(row.id)
        return
    try:
        quotas.admit_warm_sandbox(db.session.get(Tenant, config.tenant_id))
    except quotas.OverQuota as exc:
        _forget(row.id)
        _failed(config.id, pool, "Held back: " + exc.message)
        return
    budget = int(current_app.config.get("SANDBOX_MEMORY_BUDGET_MB") or 0)
    if budget and quotas.reserved_memory_mb(document.memory_mb) > budget:
        _forget(row.id)
        _failed(config.id, pool, f"Held back: the deployment's sandboxes hold all of its "
                                 f"{budget} MB memory budget.")
        return
    spec = spec_of(config, row.id)
    backend = backend_for(config.config)
    try:
        info = backend.create(spec)
        identity = getattr(backend, "engine_identity", None)
        uid = identity() if identity is not None else None
    except BackendError as exc:
        _forget(row.id)
        log.warning("warm pool of config %s: create failed: %s", config.id, exc.reason)
        _failed(config.id, pool, "Could not start a sandbox: " + incidents.human(
            config.config, exc))
        return
    finally:
        backend.close()
    ready = db.session.execute(update(PoolSandbox).where(
        PoolSandbox.id == row.id, PoolSandbox.state == PoolState.warming).values(
        state=PoolState.ready, sandbox_id=info.id, engine_uid=uid, ready_at=utcnow(),
        policy=document.policy_summary(spec.network)))
    db.session.execute(update(WarmPool).where(WarmPool.config_id == config.id).values(
        problem="", problem_at=None, retry_at=None, failures=0))
    db.session.commit()
    if ready.rowcount != 1:  # drained while we created it
        _remove(engine, info.id)


def _failed(config_id: str, pool: WarmPool, sentence: str) -> None:
    """Note why the pool could not refill, and wait longer after each failure in a row."""
    delay = RETRY_AFTER[min(pool.failures, len(RETRY_AFTER) - 1)]
    db.session.execute(update(WarmPool).where(WarmPool.config_id == config_id).values(
        problem=sentence[:300], problem_at=utcnow(), failures=WarmPool.failures + 1,
        retry_at=utcnow() + timedelta(seconds=delay)))
    db.session.commit()


def _forget(pool_id: str) -> None:
    db.session.execute(delete(PoolSandbox).where(PoolSandbox.id == pool_id))
    db.session.commit()


def _drain(row: PoolSandbox) -> None:
    """Remove a pool sandbox nobody claimed; a claim that wins the race keeps it."""
    if row.state != PoolState.draining:
        marked = db.session.execute(update(PoolSandbox).where(
            PoolSandbox.id == row.id, PoolSandbox.state == row.state)
            .values(state=PoolState.draining))
        db.session.commit()
        if marked.rowcount != 1:
            return
    try:
        if row.sandbox_id:
            _remove(row.engine, row.sandbox_id)
        else:  # its keeper stopped while creating: find it by its label
            backend = _engine_backend(row.engine)
            try:
                for sandbox in backend.list(labels(row.tenant_id, pool_id=row.id)):
                    backend.delete(sandbox.id)
            finally:
                backend.close()
    except BackendError as exc:
        log.warning("warm pool sandbox %s not removed yet: %s", row.id, exc.reason)
        return
    _forget(row.id)


def drain(config_id: str | None = None) -> None:
    """Remove now every pool sandbox not in a session's hands, of one config or of all,
    on the engines this process owns (tests end with it; keepers do it over time)."""
    query = select(PoolSandbox).where(PoolSandbox.state != PoolState.claimed)
    if config_id is not None:
        query = query.where(PoolSandbox.config_id == config_id)
    for row in list(db.session.scalars(query)):
        if endpoints.owns(row.engine):
            _drain(row)


def _remove(engine: str, sandbox_id: str) -> None:
    backend = _engine_backend(engine)
    try:
        backend.delete(sandbox_id)
    except SandboxNotFound:
        pass
    finally:
        backend.close()


def _forget_claims(now: datetime) -> None:
    """Claimed rows whose session is gone, or never bound the sandbox: let go (the sandbox
    goes too unless some session holds it)."""
    stale = list(db.session.scalars(select(PoolSandbox).where(
        PoolSandbox.state == PoolState.claimed, PoolSandbox.claimed_at < now - CLAIM_EXPIRY,
        ~exists().where(SandboxSession.id == PoolSandbox.session_id,
                        SandboxSession.sandbox_id == PoolSandbox.sandbox_id))))
    for row in stale:
        if not endpoints.owns(row.engine):
            continue
        held = db.session.scalar(select(exists().where(
            SandboxSession.sandbox_id == row.sandbox_id)))
        if held:
            _forget(row.id)
        else:
            _drain(row)


# -- what the dashboard shows -------------------------------------------------------------

@dataclass(frozen=True)
class PoolStatus:
    config_id: str
    config_name: str
    size: int
    ready: int
    warming: int
    in_use: int  # claimed sandboxes whose sessions still run
    state: str  # "ready", "filling", "off", "held back"
    note: str


def status(tenant_id: int, now: datetime | None = None) -> list[PoolStatus]:
    """Each Docker config of the workspace that asks for a pool, and how it stands (one
    statement, whatever the number of configs: the dashboard's budget)."""
    now = now or utcnow()

    def count(state: PoolState):
        return func.coalesce(func.sum(case((PoolSandbox.state == state, 1), else_=0)), 0)

    counts = select(PoolSandbox.config_id, count(PoolState.ready).label("ready"),
                    count(PoolState.warming).label("warming"),
                    count(PoolState.claimed).label("claimed")).where(
        PoolSandbox.tenant_id == tenant_id).group_by(PoolSandbox.config_id).subquery()
    found = db.session.execute(
        select(SandboxConfig, WarmPool, counts.c.ready, counts.c.warming, counts.c.claimed)
        .outerjoin(WarmPool, WarmPool.config_id == SandboxConfig.id)
        .outerjoin(counts, counts.c.config_id == SandboxConfig.id)
        .where(SandboxConfig.tenant_id == tenant_id, SandboxConfig.deleted_at.is_(None),
               SandboxConfig.sandbox_type == "docker").order_by(SandboxConfig.name))
    out = []
    for config, pool, ready, warming, claimed in found:
        asked = int((config.config.get("docker") or {}).get("warm_pool_size") or 0)
        if not asked:
            continue
        size, ready, warming = size_of(config.config), int(ready or 0), int(warming or 0)
        if not size:
            state, note = "off", "Warm pools are turned off on this deployment."
        elif pool is None or not pool.last_session_at or \
                pool.last_session_at <= now - POOL_ACTIVE:
            state, note = "off", "Off: no new session in the last hour. The next one starts it."
        elif pool.problem:
            state, note = "held back", pool.problem
        elif ready >= size:
            state, note = "ready", f"{ready} of {size} ready."
        else:
            state, note = "filling", f"{ready} of {size} ready, {warming} starting."
        out.append(PoolStatus(config.id, config.name, size, ready, warming,
                              int(claimed or 0), state, note))
    return out
