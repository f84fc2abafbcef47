"""The egress log (issue 24 item 2): what Docker's egress gateway decided for each
connection of a workspace's sandboxes, and what their resolver refused.

The gateway and the resolver write per-sandbox files on the host
(app/backends/docker/egress/log_files.py); `ingest` moves their new lines into
`egress_events` in one batch (from the reaper every 30 s and before the log is read),
`sweep` drops rows past EGRESS_LOG_RETENTION_DAYS. A workspace with
`egress_log_disabled` keeps no rows. The log holds names, addresses, ports, sizes and
verdicts, never a request's content.

Reading: `page` (the API and the Egress page, filtered, newest first), `totals` (per
host, for the chosen filters) and `csv_lines` (an export whose cells cannot start a
spreadsheet formula).
"""

from __future__ import annotations

import io
import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import Select, case, delete, func, insert, select

from app.backends.base import BackendError
from app.backends.docker.egress import log_files
from app.backends.docker.egress.settings import EgressSettings
from app.extensions import db
from app.models import EgressEvent, SandboxSession, Tenant
from app.models.types import utcnow
from app.security import csv_safe
from app.services import Actor, audit, paging
from app.services.sandboxes import pools

VERDICTS = ("allowed", "denied", "failed")
PROTOCOLS = ("tls", "http", "tcp", "dns")
INGEST_BATCH = 5000
_HOST = re.compile(r"^[a-z0-9*_.-]{1,253}$")
_UUID = re.compile(r"^[0-9a-f-]{36}$")


# -- ingesting ---------------------------------------------------------------------------

def _text(value: Any, size: int) -> str:
    return str(value or "")[:size]


def _host(value: Any) -> str | None:
    """A name the sandbox presented is the sandbox's to choose: kept only when it looks
    like one."""
    text = str(value or "").lower()
    return text if _HOST.match(text) else None


def _address(value: Any) -> str | None:
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


def _int(value: Any, low: int = 0, high: int = 2**62) -> int:
    try:
        return min(max(int(value), low), high)
    except (TypeError, ValueError):
        return low


def _rows(lines: list[dict]) -> list[dict[str, Any]]:
    """Lines as rows, for workspaces that exist and keep a log."""
    metas = [line.get("meta") if isinstance(line.get("meta"), dict) else {} for line in lines]
    tenants = {int(m["sandlot_tenant_id"]) for m in metas
               if str(m.get("sandlot_tenant_id", "")).isdigit()}
    keeping = set(db.session.scalars(select(Tenant.id).where(
        Tenant.id.in_(tenants), Tenant.egress_log_disabled.is_(False)))) if tenants else set()
    # A warm pool sandbox's labels name its pool row, which names the session that
    # claimed it (labels cannot change after the create).
    claimed = pools.claimed_sessions({str(m.get("sandlot_pool_id")) for m in metas
                                      if _UUID.match(str(m.get("sandlot_pool_id") or ""))})
    for meta in metas:
        if meta.get("sandlot_pool_id") in claimed:
            meta["sandlot_session_id"], meta["sandlot_purpose"] = \
                claimed[meta["sandlot_pool_id"]], "session"
    session_ids = {str(m.get("sandlot_session_id")) for m in metas
                   if _UUID.match(str(m.get("sandlot_session_id") or ""))}
    sessions = {row.id: row for row in db.session.execute(
        select(SandboxSession.id, SandboxSession.user_id, SandboxSession.tenant_id).where(
            SandboxSession.id.in_(session_ids)))} if session_ids else {}
    rows = []
    for line, meta in zip(lines, metas, strict=True):
        tenant = str(meta.get("sandlot_tenant_id", ""))
        if not tenant.isdigit() or int(tenant) not in keeping:
            continue
        session = sessions.get(str(meta.get("sandlot_session_id") or ""))
        if session is not None and session.tenant_id != int(tenant):
            session = None
        session_id = session.id if session is not None else None
        try:
            at = datetime.fromtimestamp(float(line.get("t")), UTC)
        except (TypeError, ValueError, OverflowError, OSError):
            continue
        verdict = str(line.get("verdict"))
        protocol = str(line.get("protocol"))
        rows.append({
            "tenant_id": int(tenant), "sandbox_config_id": _text(
                meta.get("sandlot_sandbox_config_id"), 36) or None,
            "session_id": session_id,
            "user_id": session.user_id if session is not None else None,
            "purpose": _text(meta.get("sandlot_purpose") or "session", 16), "at": at,
            "protocol": protocol if protocol in PROTOCOLS else "tcp",
            "host": _host(line.get("host")), "address": _address(line.get("address")),
            "port": _int(line.get("port"), 0, 65535),
            "verdict": verdict if verdict in VERDICTS else "failed",
            "rule": _text(line.get("rule"), 300), "sent": _int(line.get("sent")),
            "received": _int(line.get("received")),
            "duration_ms": _int(line.get("ms"), 0, 2**31 - 1)})
    return rows


def _store(lines: list[dict]) -> None:
    rows = _rows(lines)
    if rows:
        db.session.execute(insert(EgressEvent), rows)
    db.session.commit()


def ingest(limit: int = INGEST_BATCH) -> int:
    """Move new lines of this host's egress log files into the database; how many lines
    were taken (rows of workspaces that keep no log are dropped)."""
    try:
        state_dir = EgressSettings.from_env().state_dir
    except BackendError:
        return 0
    try:
        return log_files.collect(state_dir, _store, limit)
    except Exception:
        db.session.rollback()
        raise


def set_disabled(tenant: Tenant, actor: Actor, disabled: bool) -> bool:
    """Turn the workspace's egress log off (its rows go at once, and nothing more is
    kept) or on again; audited."""
    if tenant.egress_log_disabled != disabled:
        tenant.egress_log_disabled = disabled
        if disabled:
            db.session.execute(delete(EgressEvent).where(EgressEvent.tenant_id == tenant.id))
        audit.record(tenant, actor, "workspace.egress_log_disabled" if disabled
                     else "workspace.egress_log_enabled", "tenant", tenant.id)
        db.session.commit()
    return tenant.egress_log_disabled


def sweep(now: datetime | None = None) -> int:
    """Drop rows older than the retention; how many."""
    days = int(current_app.config.get("EGRESS_LOG_RETENTION_DAYS") or 7)
    cutoff = (now or utcnow()) - timedelta(days=max(days, 0))
    done = db.session.execute(delete(EgressEvent).where(EgressEvent.at < cutoff))
    db.session.commit()
    return done.rowcount or 0


def housekeeping() -> None:
    """The reaper's pass: ingest what the host wrote, sweep what is past retention."""
    while ingest() >= INGEST_BATCH:
        pass
    sweep()


# -- reading -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Filters:
    config_id: str | None = None
    session_id: str | None = None
    user_id: int | None = None
    verdict: str | None = None
    host: str | None = None  # a name or address, or part of one
    since: datetime | None = None
    until: datetime | None = None


def _query(tenant_id: int, filters: Filters) -> Select:
    stmt = select(EgressEvent).where(EgressEvent.tenant_id == tenant_id)
    if filters.config_id:
        stmt = stmt.where(EgressEvent.sandbox_config_id == filters.config_id)
    if filters.session_id:
        stmt = stmt.where(EgressEvent.session_id == filters.session_id)
    if filters.user_id is not None:
        stmt = stmt.where(EgressEvent.user_id == filters.user_id)
    if filters.verdict:
        stmt = stmt.where(EgressEvent.verdict == filters.verdict)
    if filters.host:
        needle = f"%{filters.host.lower().replace('%', '').replace('_', '')}%"
        stmt = stmt.where((EgressEvent.host.like(needle)) | (EgressEvent.address.like(needle)))
    if filters.since:
        stmt = stmt.where(EgressEvent.at >= filters.since)
    if filters.until:
        stmt = stmt.where(EgressEvent.at < filters.until)
    return stmt


def page(tenant_id: int, filters: Filters, window: paging.Window) -> paging.Slice:
    """Newest first."""
    return paging.keyset(_query(tenant_id, filters), (EgressEvent.at, EgressEvent.id),
                         window, desc=True)


def newer_than(tenant_id: int, filters: Filters, last_id: int, limit: int = 50) -> list:
    """Rows after the newest one a page showed (the page's live updates), newest first."""
    stmt = _query(tenant_id, filters).where(EgressEvent.id > last_id)
    return list(db.session.scalars(stmt.order_by(EgressEvent.id.desc()).limit(limit)))


def totals(tenant_id: int, filters: Filters, limit: int = 20) -> list[dict[str, Any]]:
    """Per destination (the name, else the address): connections, denials, bytes."""
    base = _query(tenant_id, filters).subquery()
    target = func.coalesce(base.c.host, base.c.address, "")
    stmt = (select(target.label("target"), func.count().label("connections"),
                   func.sum(case((base.c.verdict == "denied", 1), else_=0)).label("denied"),
                   func.sum(base.c.sent).label("sent"),
                   func.sum(base.c.received).label("received"))
            .group_by(target).order_by(func.count().desc(), target).limit(limit))
    return [{"target": r.target, "connections": r.connections, "denied": int(r.denied or 0),
             "sent": int(r.sent or 0), "received": int(r.received or 0)}
            for r in db.session.execute(stmt)]


CSV_COLUMNS = ("at", "verdict", "rule", "protocol", "host", "address", "port", "sent",
               "received", "duration_ms", "sandbox_config_id", "session_id", "member",
               "purpose")
CSV_MAX = 100_000


def csv_lines(tenant_id: int, filters: Filters, member_label: dict[int, str]) -> Iterator[str]:
    """The export, a line at a time (newest first, at most CSV_MAX rows); no cell can start
    a spreadsheet formula (security.csv_safe)."""
    out = io.StringIO()
    writer = csv_safe.writer(out)

    def line(cells) -> str:
        out.seek(0)
        out.truncate()
        csv_safe.write_row(writer, ["" if c is None else c for c in cells])
        return out.getvalue()

    yield line(CSV_COLUMNS)
    stmt = _query(tenant_id, filters).order_by(EgressEvent.at.desc(), EgressEvent.id.desc())
    for row in db.session.scalars(stmt.limit(CSV_MAX).execution_options(yield_per=1000)):
        yield line((
            row.at.isoformat(), row.verdict, row.rule, row.protocol, row.host, row.address,
            row.port, row.sent, row.received, row.duration_ms, row.sandbox_config_id,
            row.session_id, member_label.get(row.user_id, "") if row.user_id else "",
            row.purpose))
