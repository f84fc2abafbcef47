"""The Egress page (issue 24 item 2, admins): what the workspace's Docker sandboxes
reached and were refused, the rule that decided each connection, totals per destination,
new rows as they come (htmx polling), and a CSV export of the same filters."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from flask import (
    Response,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    stream_with_context,
    url_for,
)

from app.auth.guards import guard
from app.errors import AppError, NotFound
from app.extensions import db
from app.models import EgressEvent, Role, SandboxConfig
from app.models.types import utcnow
from app.services import paging
from app.services.identity import members
from app.services.sandboxes import egress_access, egress_log
from app.tenancy import current_tenant, principal
from app.web import bp

PAGE = 50
RANGES = {"1h": ("Last hour", timedelta(hours=1)), "24h": ("Last 24 hours", timedelta(days=1)),
          "7d": ("Last 7 days", timedelta(days=7))}
VERDICT_LABELS = {"allowed": "Allowed", "denied": "Denied", "failed": "Unreachable"}
POLL_SECONDS = 5


def _int(name: str) -> int | None:
    value = request.args.get(name, "")
    return int(value) if value.isdigit() and len(value) < 19 else None


def _choices(tenant) -> dict[str, Any]:
    configs = list(db.session.execute(
        db.select(SandboxConfig.id, SandboxConfig.name).where(
            SandboxConfig.tenant_id == tenant.id, SandboxConfig.deleted_at.is_(None))
        .order_by(SandboxConfig.name)))
    people = [(m.user.id, m.user.email) for m in members.list_members(tenant)]
    return {"configs": configs, "people": people}


def _filters(choices: dict[str, Any]) -> tuple[egress_log.Filters, dict[str, Any]]:
    """The filters the query string asks for, each dropped unless it is one we offer."""
    config = request.args.get("config", "")
    config = config if config in {c.id for c in choices["configs"]} else ""
    member = _int("member")
    member = member if member in {p[0] for p in choices["people"]} else None
    verdict = request.args.get("verdict", "")
    verdict = verdict if verdict in VERDICT_LABELS else ""
    host = request.args.get("host", "").strip()[:253]
    span = request.args.get("range", "24h")
    span = span if span in RANGES else "24h"
    shown = {"config": config, "member": member, "verdict": verdict, "host": host,
             "range": span}
    filters = egress_log.Filters(config_id=config or None, user_id=member,
                                 verdict=verdict or None, host=host or None,
                                 since=utcnow() - RANGES[span][1])
    return filters, shown


def _args(shown: dict[str, Any]) -> dict[str, Any]:
    """The filters as url_for arguments (empty ones left out)."""
    return {k: v for k, v in shown.items() if v not in ("", None)}


def row_view(row: EgressEvent, configs: dict[str, str],
             people: dict[int, str]) -> dict[str, Any]:
    return {"id": row.id, "at": row.at, "verdict": row.verdict,
            "verdict_label": VERDICT_LABELS.get(row.verdict, row.verdict),
            "rule": row.rule, "protocol": row.protocol,
            "target": row.host or row.address or "", "address": row.address if row.host else "",
            "port": row.port, "sent": row.sent, "received": row.received,
            "duration_ms": row.duration_ms, "config": configs.get(row.sandbox_config_id or "", ""),
            "member": people.get(row.user_id) if row.user_id else "",
            "purpose": row.purpose}


@bp.get("/egress")
@guard(Role.admin)
def egress():
    tenant = current_tenant()
    choices = _choices(tenant)
    filters, shown = _filters(choices)
    egress_log.ingest()
    before = _int("before")
    after = None
    if before is not None:
        anchor = db.session.get(EgressEvent, before)
        if anchor is not None and anchor.tenant_id == tenant.id:
            after = (anchor.at, anchor.id)
    page = egress_log.page(tenant.id, filters, paging.Window(PAGE, after))
    configs = {c.id: c.name for c in choices["configs"]}
    people = dict(choices["people"])
    rows = [row_view(r, configs, people) for r in page.rows]
    return render_template(
        "egress.html", rows=rows, totals=egress_log.totals(tenant.id, filters),
        total=page.total, more=page.more, first=after is None,
        next_before=page.rows[-1].id if page.more and page.rows else None,
        newest=max((r.id for r in page.rows), default=0), shown=shown, args=_args(shown),
        ranges=RANGES, verdicts=VERDICT_LABELS, poll=POLL_SECONDS,
        retention_days=current_app.config["EGRESS_LOG_RETENTION_DAYS"],
        log_disabled=tenant.egress_log_disabled,
        requests=[_request_view(r, configs, people) for r in egress_access.pending(tenant)],
        **choices)


def _request_view(row, configs: dict[str, str], people: dict[int, str]) -> dict[str, Any]:
    return {"id": row.id, "host": row.host, "reason": row.reason, "at": row.created_at,
            "config": configs.get(row.sandbox_config_id, ""),
            "member": people.get(row.user_id, "a former member") if row.user_id else ""}


@bp.post("/egress/requests/<uuid:request_id>/<any(approve, decline):decision>")
@guard(Role.admin)
def egress_request_decide(request_id, decision):
    """Allow a requested host on its config (a policy edit) or decline the request."""
    tenant = current_tenant()
    try:
        if decision == "approve":
            row, running = egress_access.approve(tenant, principal(), str(request_id),
                                                 running=request.form.get("running") == "1")
            message = f"{row.host} is allowed on the config for sandboxes created from now on"
            message += "." if running is None else _running_sentence(running)
        else:
            row = egress_access.decline(tenant, principal(), str(request_id))
            message = f"Declined the request for {row.host}."
    except NotFound:
        raise  # another workspace's, or decided already: a 404 like any other
    except AppError as exc:
        db.session.rollback()
        flash(exc.message, "error")
    else:
        flash(message, "success")
    return redirect(url_for("web.egress"), code=303)


def _running_sentence(running: egress_access.Running) -> str:
    """' and for 2 running sandboxes; 1 other keeps …' after the approval's sentence."""
    def many(n: int, one: str, more: str) -> str:
        return f"{n} {one if n == 1 else more}"
    sentence = f" and for {many(running.updated, 'running sandbox', 'running sandboxes')}"
    if running.kept:
        sentence += (f"; {many(running.kept, 'other keeps', 'others keep')} the policy it "
                     "was created with until it is replaced")
    return sentence + "."


@bp.get("/egress/new")
@guard(Role.admin)
def egress_new():
    """Rows newer than the page's newest (the first page polls this), and the poller
    itself, moved on to the newest row it returned."""
    tenant = current_tenant()
    choices = _choices(tenant)
    filters, shown = _filters(choices)
    egress_log.ingest()
    newest = _int("after") or 0
    rows = egress_log.newer_than(tenant.id, filters, newest)
    configs = {c.id: c.name for c in choices["configs"]}
    people = dict(choices["people"])
    return render_template("egress/_new.html", rows=[row_view(r, configs, people) for r in rows],
                           newest=max([newest] + [r.id for r in rows]), args=_args(shown),
                           poll=POLL_SECONDS)


@bp.post("/egress/log-setting")
@guard(Role.admin)
def egress_log_setting():
    """Keep an egress log for this workspace, or not (its rows go when it is turned off)."""
    tenant = current_tenant()
    egress_log.set_disabled(tenant, principal(), request.form.get("keep") != "on")
    flash("The egress log is off: nothing is kept of this workspace's connections."
          if tenant.egress_log_disabled else "The egress log is on again.", "success")
    return redirect(url_for("web.egress"), code=303)


@bp.get("/egress.csv")
@guard(Role.admin)
def egress_csv():
    tenant = current_tenant()
    choices = _choices(tenant)
    filters, _ = _filters(choices)
    if request.args.get("range") == "all":
        filters = replace(filters, since=None)
    egress_log.ingest()
    lines = egress_log.csv_lines(tenant.id, filters, dict(choices["people"]))
    stamp = utcnow().strftime("%Y%m%d-%H%M")
    return Response(stream_with_context(lines), mimetype="text/csv", headers={
        "Content-Disposition": f'attachment; filename="egress-{stamp}.csv"'})
