"""The pieces of a sandbox check: row names and skip reasons, the row itself and the check
sandbox's creation (reference 5.4). The sentences an admin reads are incidents'; the
time budget and bounded calls are job_limits'."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.backends.base import (
    Backend,
    BackendAuthError,
    BackendError,
    SandboxInfo,
    SandboxSpec,
)
from app.services import job_limits
from app.services.sandboxes import endpoints

log = logging.getLogger("sandlot.sandbox_check")

SANDBOX_TTL_SEC = 120  # the check sandbox's own timeout, should cleanup fail
EXEC_TIMEOUT_SEC = 30
EXEC_MARK = "sandlot-ok"

CLIENT_BUILD, API_URL, CREDENTIAL, TEMPLATE = (
    "client_build", "api_url_reachable", "credential_valid", "template_exists")
EXEC, EGRESS, CANARY = "sandbox_exec", "egress_available", "egress_denied_enforced"
GATEWAY = "egress_gateway"  # ours: Docker's egress gateway on this host (issue 24)
# Skip reasons: the reference's five, then ours.
NEEDS_DEEP = "needs_deep_check"
UNREACHABLE = "control_plane_unreachable"
NOT_CREATED = "sandbox_not_created"
EXEC_FAILED = "sandbox_exec_failed"
RESTRICTED = "egress_restricted_by_policy"
CREDENTIALS_REJECTED = "credentials_rejected"
TEMPLATE_NOT_SET = "template_not_set"
NOT_SUPPORTED = "not_supported"
NO_DENIED_TARGET = "no_denied_target"
OUT_OF_BUDGET = "check_budget_exhausted"


@dataclass
class Check:
    """One row: ok True (passed), False (failed) or None (skipped, with a reason)."""

    name: str
    ok: bool | None
    message: str = ""
    reason: str = ""
    latency_ms: int = 0
    # egress_available: each destination tried, {host, listed, allowed, reachable, detail}
    targets: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return {True: "ok", False: "failed", None: "skipped"}[self.ok]

    def line(self) -> str:
        why = f" [{self.reason}]" if self.reason else ""
        return f"{self.name}: {self.status}{why} ({self.latency_ms} ms) {self.message}".rstrip()


Report = Callable[[Check, int, int], None]


class Creation:
    """Create a sandbox; one that arrives after the check gave up deletes itself."""

    def __init__(self, backend: Backend, spec: SandboxSpec):
        self.backend, self.spec = backend, spec
        self.lock = threading.Lock()
        self.info: SandboxInfo | None = None
        self.abandoned = False

    def __call__(self) -> SandboxInfo:
        info = self.backend.create(self.spec)
        with self.lock:
            self.info, late = info, self.abandoned
        if late:
            delete_quietly(self.backend, info.id)
        return info

    def abandon(self) -> str | None:
        """Stop waiting; the id of a sandbox that already exists (the caller deletes it)."""
        with self.lock:
            self.abandoned = True
            return self.info.id if self.info is not None else None


def delete_quietly(backend: Backend, sandbox_id: str) -> None:
    try:
        job_limits.bounded(lambda: backend.delete(sandbox_id), job_limits.CHECK_CLEANUP_SEC)
    except BackendError as exc:
        log.warning("check sandbox %s was not deleted: %s", sandbox_id[:12], exc.reason)


def client_problem(doc: dict[str, Any]) -> None:
    """What makes a client impossible to build before any I/O (the engine's TLS files)."""
    if doc["sandbox_type"] != "docker":
        return
    engine = endpoints.engine(endpoints.engine_of(doc.get("docker") or {}))
    if engine is not None and engine.tls_dir:
        missing = [n for n in ("ca.pem", "cert.pem", "key.pem")
                   if not os.path.isfile(os.path.join(engine.tls_dir, n))]
        if missing:
            raise BackendAuthError(f"TLS files missing in {engine.tls_dir}: "
                                   f"{', '.join(missing)}")


def without_template(doc: dict[str, Any]) -> dict[str, Any]:
    kind = doc["sandbox_type"]
    block = dict(doc.get(kind) or {})
    block["image" if kind == "docker" else "template_id"] = ""
    return {**doc, kind: block}


def template_problem(name: str, found: Any) -> str:
    if found is None:
        return f"Template {name} is not in the catalog: build it or pick another."
    if found.status in ("building", "pending"):
        return f"Template {name} is still {found.status}: try again when it is ready."
    if found.status == "untagged":
        # Reference 5.4: a create resolves the `default` tag, so this one never boots.
        return (f"Template {name} was built without the `default` tag, so it will never "
                "become ready: rebuild it.")
    return f"Template {name} is {found.status}: rebuild it."


def epoch(stamp: str | None) -> float:
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0
    except ValueError:
        return 0.0


def secret_values(doc: dict[str, Any]) -> list[str]:
    """Every secret the document holds, longest first (so none is half-masked)."""
    values = [str((doc.get(k) or {}).get("api_key") or "") for k in ("e2b", "cube")]
    values += [str(v) for v in (doc.get("env_vars") or {}).values()]
    network = doc.get("network") or {}
    for rule in network.get("cube_rules") or []:
        values += [str(i.get("secret") or "") for i in rule.get("inject") or []]
    for rule in network.get("e2b_host_rules") or []:
        values += [str(v) for v in (rule.get("headers") or {}).values()]
    return sorted({v for v in values if len(v) >= 3}, key=len, reverse=True)
