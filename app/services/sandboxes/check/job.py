"""The sandbox check (reference 5, decisions 6): can this config reach its provider, and,
for a deep check, create a sandbox, run a command in it and reach the internet?

`start` validates the request (unsaved form values merged over the stored config, as an
update merges them) and enqueues a `sandbox_check` job. The job calls `run_job`, which
reads the request back (the unsaved values travel sealed with the app's secrets key,
never in plaintext on the row) and runs the checks (sandbox_check_run). Its result is
the reference 5.2 response: one row per check in order, skipped rows with a reason, and
the backend's capabilities.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from flask import current_app

from app.errors import NotFound, ValidationFailed
from app.extensions import db
from app.models import Job, SandboxConfig
from app.security.crypto import crypto
from app.services import job_limits, jobs
from app.services.sandboxes import document as sandbox_doc
from app.services.sandboxes import provider
from app.services.sandboxes.check import probe
from app.services.sandboxes.check.parts import Check, Report
from app.services.sandboxes.check.run import Run
from app.tenancy import owned_or_404

JOB_KIND = "sandbox_check"
JOB_TIMEOUT_SEC = job_limits.LIMITS[JOB_KIND]  # the 90 s budget, cleanup, a margin
UNSAVED = "unsaved"  # sandlot_sandbox_config_id of a check sandbox for an unsaved config
# Check.line() as the job log holds it: the rows of a check still running.
LOG_LINE = re.compile(r"^(\w+): (ok|failed|skipped)(?: \[(\w+)\])? \((\d+) ms\) ?(.*)$")

__all__ = ["JOB_KIND", "Check", "check", "prepare", "rows_of", "run_job", "start", "wait"]


def prepare(stored: SandboxConfig | None, raw: Any, deep: bool,
            may_reuse: bool = True) -> dict[str, Any]:
    """The document to check: `raw` (unsaved form values) over the stored config, where
    `***` or "" keeps a stored secret (reference 1.3) only with unchanged endpoints and
    for a caller who may update the config (`may_reuse`, decisions 11), validated as a
    save validates it. A shallow check needs no template yet; a deep one does."""
    if raw is None and stored is None:
        raise ValidationFailed.one("config", "send config, config_id or both")
    if raw is None:  # the stored config, re-validated: it may predate a rule
        merged = sandbox_doc.merge(sandbox_doc.masked(stored.config), stored.config)
    else:
        merged = sandbox_doc.merge(raw, stored.config, may_reuse=may_reuse) \
            if stored is not None else raw
    return sandbox_doc.validate(merged, require_template=deep)


def start(tenant_id: int, actor_id: int | None, stored: SandboxConfig | None, raw: Any,
          deep: bool, may_reuse: bool = True, api_key_id: int | None = None) -> Job:
    """Validate now (a bad config is a 400, not a failed job), then enqueue the check.
    `may_reuse` (may the caller update the config?) travels with the job, which re-reads
    the request without a caller."""
    doc = prepare(stored, raw, deep, may_reuse)
    params = {"config_id": stored.id if stored is not None else None, "deep": bool(deep),
              "provider": doc["sandbox_type"],
              "sealed_config": seal(raw) if raw is not None else None,
              "may_reuse": bool(may_reuse)}
    return jobs.enqueue(JOB_KIND, tenant_id=tenant_id, actor_id=actor_id,
                        target_type="sandbox_config" if stored is not None else None,
                        target_id=stored.id if stored is not None else None,
                        params=params, timeout_sec=JOB_TIMEOUT_SEC, api_key_id=api_key_id)


def seal(raw: Any) -> str:
    """Unsaved form values may hold typed secrets: the job row keeps them encrypted."""
    return crypto().encrypt(json.dumps(raw))


def unseal(token: str) -> Any:
    return json.loads(crypto().decrypt(token))


def wait(tenant_id: int, job_id: str, seconds: float, interval: float = 0.2) -> Job:
    """The job row once it is terminal, or as it stands after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        db.session.rollback()  # a fresh read each time: the worker commits elsewhere
        job = db.session.get(Job, job_id, populate_existing=True)
        if job is None or job.tenant_id != tenant_id:
            raise NotFound("No such job in this workspace.")
        if job.is_terminal or time.monotonic() >= deadline:
            return job
        time.sleep(interval)


def run_job(tenant_id: int, job_id: str, params: dict[str, Any],
            report: Report | None = None) -> dict[str, Any]:
    """What the `sandbox_check` job does with its row's params; idempotent (each run
    creates and deletes its own sandbox)."""
    stored = None
    if params.get("config_id"):
        stored = owned_or_404(SandboxConfig, params["config_id"], tenant_id,
                              "The sandbox config was deleted before the check ran.")
    sealed = params.get("sealed_config")
    deep = bool(params.get("deep"))
    doc = prepare(stored, unseal(sealed) if sealed else None, deep,
                  bool(params.get("may_reuse", False)))
    db.session.rollback()  # nothing to write; hold no transaction through the check
    metadata = provider.labels(tenant_id, config_id=stored.id if stored is not None else UNSAVED,
                               provider=doc["sandbox_type"], purpose="check", check_id=job_id)
    urls = probe.parse_urls(current_app.config.get("SANDBOX_EGRESS_PROBE_URLS") or "")
    return check(doc, deep=deep, metadata=metadata, probe_urls=urls, report=report)


def check(doc: dict[str, Any], *, deep: bool, metadata: dict[str, str],
          probe_urls: list[str], report: Report | None = None,
          budget_sec: float = job_limits.CHECK_BUDGET_SEC) -> dict[str, Any]:
    """Run the checks of reference 5.3 on a validated document. A provider failure never
    raises: it becomes a failed row with a human reason."""
    return Run(doc, deep, metadata, probe_urls, report, budget_sec).result()


def rows_of(job: Job) -> list[dict[str, Any]]:
    """The rows of a check job: its result once done, else those its log has so far."""
    if job.result:
        return list(job.result.get("checks") or [])
    rows = []
    for line in (job.log or "").splitlines():
        match = LOG_LINE.match(line)
        if match:
            name, status, reason, latency, message = match.groups()
            rows.append({"name": name, "ok": {"ok": True, "failed": False}.get(status),
                         "reason": reason or "", "latency_ms": int(latency),
                         "message": message})
    return rows
