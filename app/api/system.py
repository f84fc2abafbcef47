"""System endpoints under /api/v1/system: the sandbox check (reference 5, guard 2.3)."""

from __future__ import annotations

from typing import Any

from flask import current_app
from pydantic import Field

from app.api import bp
from app.api._core import Out, Strict, doc, ok, parse_body, project
from app.auth.guards import guard
from app.errors import AppError, BadRequest, Internal
from app.models import JobStatus, Role, SandboxConfig
from app.services.sandboxes import configs as sandbox_configs
from app.services.sandboxes.check import job as sandbox_check
from app.tenancy import get_or_404, principal


class SandboxCheckIn(Strict):
    config: dict[str, Any] | None = Field(
        default=None, description="Unsaved config document; *** or empty secrets keep the "
        "stored ones of config_id only while every address they are sent to is unchanged, "
        "and only for a caller who may update configs (others must send the secrets)")
    config_id: str | None = Field(default=None, max_length=36)
    deep: bool = Field(default=False, description="Also create a real sandbox (deleted "
                       "afterwards), run a command in it and probe egress")


class CheckTarget(Out):
    host: str = Field(description="As the policy or the probe URL writes it (case kept)")
    listed: bool = Field(description="One of the config's allowed destinations (a warning "
                         "when it does not answer), else a probe URL of the deployment")
    allowed: bool = Field(description="Whether the config's network policy allows it")
    reachable: bool
    detail: str = Field(description="What came back, e.g. HTTP 200 or timed out")


class CheckRow(Out):
    name: str
    ok: bool | None = Field(description="true passed, false failed, null skipped")
    message: str
    reason: str = Field(description="Why a row was skipped, e.g. needs_deep_check")
    latency_ms: int
    targets: list[CheckTarget] = Field(
        default_factory=list, description="egress_available: each destination the deep "
        "check tried (up to 3 of the policy's allowed names, then the probe URLs)")


class SandboxCheckOut(Out):
    job_id: str
    status: str = Field(description="The job's status: succeeded, or running/pending when "
                        "the check outlasted the wait (answered with 202; poll /jobs/{id})")
    ok: bool | None = None
    provider: str | None = None
    deep: bool | None = None
    checks: list[CheckRow] = Field(default_factory=list)
    capabilities: dict[str, bool] = Field(default_factory=dict)


@bp.post("/system/sandbox-check")
@guard(Role.admin, api_key="manage_vector_stores")
@doc("Check a sandbox config (stored, unsaved, or unsaved over stored): provider reachable, "
     "credentials, template; with deep, a real sandbox, a command and egress. Runs as a job; "
     "answers 202 with job_id if it outlasts the wait", request=SandboxCheckIn,
     response=SandboxCheckOut, errors=(400, 404, 503))
def sandbox_check_endpoint():
    body = parse_body(SandboxCheckIn)
    stored = get_or_404(SandboxConfig, body.config_id, "sandbox config") if body.config_id \
        else None
    who = principal()
    job = sandbox_check.start(who.tenant_id, who.actor_id, stored, body.config, body.deep,
                              may_reuse=sandbox_configs.may_update(who),
                              api_key_id=who.api_key.id if who.api_key else None)
    # The request waits SANDBOX_CHECK_WAIT_SECONDS (a few) for the check's job, then answers
    # 202 and the client polls /jobs/{id}: no request thread waits out a check's 90 s
    # budget (decisions 12).
    job = sandbox_check.wait(who.tenant_id, job.id,
                             float(current_app.config["SANDBOX_CHECK_WAIT_SECONDS"]))
    if not job.is_terminal:
        return ok(project(SandboxCheckOut, {"job_id": job.id, "status": job.status.value}), 202)
    if job.status != JobStatus.succeeded:
        error: AppError = (BadRequest if job.status == JobStatus.failed else Internal)(
            job.error or "The check did not finish.", data={"job_id": job.id})
        raise error
    return ok(project(SandboxCheckOut, {**job.result, "job_id": job.id, "status": "succeeded"}))
