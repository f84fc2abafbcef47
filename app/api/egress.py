"""The egress log over the API (issue 24 item 2): the workspace's (admins) and one
session's (its member, and admins). Rows come from Docker's egress gateway; E2B and
Cube enforce egress in their own networks and log nothing here."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Literal

from flask import g, request
from pydantic import Field, field_validator

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, parse_query, project
from app.api.paging import PageQuery, ok_page, window
from app.auth.guards import FULL_ACCESS, guard
from app.errors import NotFound
from app.models import EgressAccessRequest, EgressEvent, Role, SandboxConfig, SandboxSession
from app.services import paging
from app.services.sandboxes import egress_access, egress_log
from app.services.sessions import lifecycle as sessions
from app.tenancy import current_tenant, get_or_404, principal


class EgressQuery(PageQuery):
    verdict: Literal["allowed", "denied", "failed"] | None = Field(
        default=None, description="Only rows with this verdict")
    host: str | None = Field(default=None, max_length=253,
                             description="Only destinations whose name or address contains this")
    since: datetime | None = Field(default=None, description="From this time on (ISO 8601; "
                                   "UTC when it names no zone)")
    until: datetime | None = Field(default=None, description="Before this time")

    @field_validator("since", "until")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None \
            else value


class WorkspaceEgressQuery(EgressQuery):
    sandbox_config_id: str | None = Field(default=None, max_length=36,
                                          description="Only this config's sandboxes")
    session_id: str | None = Field(default=None, max_length=36,
                                   description="Only this session's sandbox")
    member_id: int | None = Field(default=None, ge=1,
                                  description="Only the sessions of this member (user id)")


class EgressEventOut(Out):
    id: int
    at: datetime = Field(description="When the connection opened")
    sandbox_config_id: str | None
    session_id: str | None = Field(description="Null for installs and checks")
    member_id: int | None = Field(description="The session's member (user id)")
    purpose: str = Field(description="session, install or check")
    protocol: str = Field(description="tls, http, tcp, or dns (a name the resolver refused)")
    host: str | None = Field(description="The name the connection presented (TLS SNI, HTTP "
                             "Host) or looked up; null when it presented none")
    address: str | None = Field(description="The address connected to (for an allowed "
                                "name: the one our resolver answered)")
    port: int
    verdict: str = Field(description="allowed, denied, or failed (allowed, but the "
                         "destination did not answer)")
    rule: str = Field(description="The rule that decided, e.g. `allow_out[2] *.example.org`, "
                      "`default deny`, `built-in: private-use`")
    sent: int = Field(description="Bytes from the sandbox")
    received: int = Field(description="Bytes to the sandbox")
    duration_ms: int


def event_out(row: EgressEvent) -> dict:
    return project(EgressEventOut, {
        "id": row.id, "at": row.at, "sandbox_config_id": row.sandbox_config_id,
        "session_id": row.session_id, "member_id": row.user_id, "purpose": row.purpose,
        "protocol": row.protocol, "host": row.host, "address": row.address, "port": row.port,
        "verdict": row.verdict, "rule": row.rule, "sent": row.sent, "received": row.received,
        "duration_ms": row.duration_ms})


def _uuid(raw: str | None, what: str) -> str | None:
    if raw is None:
        return None
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise NotFound(f"No such {what} in this workspace.") from None


@bp.get("/egress-log")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("The workspace's egress log (admins), newest first: every connection Docker's egress "
     "gateway decided and every name the sandbox resolver refused, with the deciding rule",
     query=WorkspaceEgressQuery, response=EgressEventOut, many=True, errors=(400, 404))
def list_egress_log():
    query = parse_query(WorkspaceEgressQuery)
    config_id = _uuid(query.sandbox_config_id, "sandbox config")
    if config_id is not None:
        get_or_404(SandboxConfig, config_id, "sandbox config")
    session_id = _uuid(query.session_id, "session")
    if session_id is not None:
        get_or_404(SandboxSession, session_id, "session")
    egress_log.ingest()
    filters = egress_log.Filters(config_id=config_id, session_id=session_id,
                                 user_id=query.member_id, verdict=query.verdict,
                                 host=query.host, since=query.since, until=query.until)
    return ok_page(egress_log.page(current_tenant().id, filters, window(query)), event_out)


@bp.get("/sessions/<uuid:session_id>/egress")
@guard(Role.viewer)
@doc("One session's egress log, newest first: its member's own sessions, or any of the "
     "workspace's for admins", query=EgressQuery, response=EgressEventOut, many=True,
     errors=(400, 404))
def list_session_egress(session_id):
    query = parse_query(EgressQuery)
    role = g.principal.role
    if role is not None and role.at_least(Role.admin):
        session = get_or_404(SandboxSession, str(session_id), "session")
    else:
        session = sessions.get_session(current_tenant(), g.principal.user, str(session_id))
    egress_log.ingest()
    filters = egress_log.Filters(session_id=session.id, verdict=query.verdict,
                                 host=query.host, since=query.since, until=query.until)
    return ok_page(egress_log.page(current_tenant().id, filters, window(query)), event_out)


# -- asking for access (issue 24 item 5) ---------------------------------------------------

class AccessRequestIn(Strict):
    host: str = Field(min_length=1, max_length=253, description="The host (a name or an "
                      "IPv4 address) the policy refused")
    reason: str = Field(default="", max_length=egress_access.REASON_MAX,
                        description="Why the sandbox needs it, for the admin who decides")


class AccessRequestOut(Out):
    id: str
    sandbox_config_id: str
    session_id: str | None
    member_id: int | None
    host: str
    reason: str
    status: str = Field(description="pending, approved or declined")
    created_at: datetime
    decided_at: datetime | None


def request_out(row: EgressAccessRequest) -> dict:
    return project(AccessRequestOut, {
        "id": row.id, "sandbox_config_id": row.sandbox_config_id, "session_id": row.session_id,
        "member_id": row.user_id, "host": row.host, "reason": row.reason, "status": row.status,
        "created_at": row.created_at, "decided_at": row.decided_at})


@bp.post("/sessions/<uuid:session_id>/egress-access-requests")
@guard(Role.viewer)
@doc("Ask for a host your session's egress policy refused (your own sessions); asking "
     "again while one is pending returns it", request=AccessRequestIn,
     response=AccessRequestOut, status=201, errors=(400, 404, 429))
def create_access_request(session_id):
    body = parse_body(AccessRequestIn)
    session = sessions.get_session(current_tenant(), g.principal.user, str(session_id))
    row = egress_access.request_access(current_tenant(), g.principal.user, session,
                                       body.host, body.reason)
    return ok(request_out(row), 201)


@bp.get("/egress-access-requests")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Access requests waiting for an admin, oldest first", query=PageQuery,
     response=AccessRequestOut, many=True, errors=(400,))
def list_access_requests():
    query = parse_query(PageQuery)
    rows = egress_access.pending(current_tenant())
    page = paging.in_memory(rows, lambda r: (r.created_at.isoformat(), r.id), window(query))
    return ok_page(page, request_out)


class ApproveIn(Strict):
    apply_to_running: bool = Field(default=False, description="Also enforce the new policy "
                                   "on the config's running Docker sandboxes at once (by "
                                   "default only sandboxes created from now on get it)")


class RunningOut(Out):
    updated: int = Field(description="Running sandboxes that now enforce the new policy")
    kept: int = Field(description="Running sandboxes that keep the policy they were created "
                      "with (no network of their own, or a provider that fixes it)")


class ApprovedOut(AccessRequestOut):
    running_sandboxes: RunningOut | None = Field(
        description="Present when apply_to_running was asked for")


@bp.post("/egress-access-requests/<uuid:request_id>/approve")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Allow the host: the config's allow_out gains it (a validated policy edit, for "
     "sandboxes created from now on; with apply_to_running, for its running Docker "
     "sandboxes too)", request=ApproveIn, response=ApprovedOut, errors=(400, 404, 409, 423))
def approve_access_request(request_id):
    body = parse_body(ApproveIn) if request.content_length else ApproveIn()
    row, running = egress_access.approve(current_tenant(), principal(), str(request_id),
                                         running=body.apply_to_running)
    return ok({**request_out(row), "running_sandboxes": running and {
        "updated": running.updated, "kept": running.kept}})


@bp.post("/egress-access-requests/<uuid:request_id>/decline")
@guard(Role.admin, api_key=FULL_ACCESS)
@doc("Decline the request", response=AccessRequestOut, errors=(404,))
def decline_access_request(request_id):
    return ok(request_out(egress_access.decline(current_tenant(), principal(),
                                                str(request_id))))
