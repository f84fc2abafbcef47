"""Running one sandbox check: the rows of reference 5.3 in order, within the 90 s budget.

Every backend call runs on a helper thread waited for at most the budget left, so a
provider that hangs costs one failed row, not the job. A deep check's sandbox is
deleted in a `finally`, and one created after the check stopped waiting deletes itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from app.backends import registry
from app.backends.base import (
    Backend,
    BackendAuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    QuotaExceeded,
    SandboxInfo,
    SandboxNotFound,
    SandboxSpec,
    Unsupported,
)
from app.services import sandbox_doc
from app.services import sandbox_probe as probe
from app.services.sandbox_configs import backend_for

log = logging.getLogger("sandlot.sandbox_check")

BUDGET_SEC = 90  # the whole check (reference 5.4)
SANDBOX_TTL_SEC = 120  # the check sandbox's own timeout, should cleanup fail
EXEC_TIMEOUT_SEC = 30
CLEANUP_TIMEOUT_SEC = 30
EXEC_MARK = "sandlot-ok"

CLIENT_BUILD, API_URL, CREDENTIAL, TEMPLATE = (
    "client_build", "api_url_reachable", "credential_valid", "template_exists")
EXEC, EGRESS, CANARY = "sandbox_exec", "egress_available", "egress_denied_enforced"
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

    @property
    def status(self) -> str:
        return {True: "ok", False: "failed", None: "skipped"}[self.ok]

    def line(self) -> str:
        why = f" [{self.reason}]" if self.reason else ""
        return f"{self.name}: {self.status}{why} ({self.latency_ms} ms) {self.message}".rstrip()


Report = Callable[[Check, int, int], None]


class OutOfBudget(Exception):
    """The budget was spent before this step could start."""


def bounded(fn: Callable[[], Any], seconds: float) -> Any:
    """`fn()` on a helper thread, waited for at most `seconds` (then BackendTimeout; the
    thread finishes on its own: see Creation for the one call whose result matters)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="sandbox-check-step", daemon=True).start()
    if not done.wait(max(0.0, seconds)):
        raise BackendTimeout(f"no answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


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
        bounded(lambda: backend.delete(sandbox_id), CLEANUP_TIMEOUT_SEC)
    except BackendError as exc:
        log.warning("check sandbox %s was not deleted: %s", sandbox_id[:12], exc.reason)


class Run:
    """One check: the rows so far, the budget, and the steps in reference order."""

    def __init__(self, doc: dict[str, Any], deep: bool, metadata: dict[str, str],
                 urls: list[str], report: Report | None, budget_sec: float = BUDGET_SEC):
        self.doc, self.deep, self.metadata, self.urls = doc, deep, metadata, urls
        self.kind = doc["sandbox_type"]
        self.report = report
        self.deadline = time.monotonic() + budget_sec
        self.secrets = _secret_values(doc)
        self.rows: list[Check] = []
        self.canary = probe.denies_anything(doc)
        self.total = 6 + int(self.canary)
        self.capabilities = registry.capabilities_for(self.kind)

    # -- rows -----------------------------------------------------------------------------

    def add(self, check: Check) -> Check:
        for secret in self.secrets:  # an error may echo a value it was given
            check.message = check.message.replace(secret, "***")
        check.message = " ".join(check.message.split())  # one line, as the job log keeps it
        self.rows.append(check)
        if self.report is not None:
            self.report(check, len(self.rows), self.total)
        return check

    def skip(self, reason: str, message: str, *names: str) -> None:
        if reason != NEEDS_DEEP and time.monotonic() >= self.deadline:
            reason, message = OUT_OF_BUDGET, f"Not run: the check's {BUDGET_SEC} s budget ran out."
        for name in names:
            if name != CANARY or self.canary:
                self.add(Check(name, None, message, reason))

    def result(self) -> dict[str, Any]:
        """Build the client, run the steps, and answer as reference 5.2."""
        try:
            _client_problem(self.doc)
            backend = backend_for(self.doc)
        except BackendError as exc:  # nothing else runs (reference 5.3)
            self.add(Check(CLIENT_BUILD, False, self.human(exc)))
            return self.response()
        self.capabilities = backend.capabilities
        try:
            self.steps(backend)
        finally:
            backend.close()
        return self.response()

    def response(self) -> dict[str, Any]:
        caps = self.capabilities
        return {
            "ok": not any(row.ok is False for row in self.rows),
            "provider": self.kind, "deep": self.deep,
            "checks": [asdict(row) for row in self.rows],
            "capabilities": {"supports_volumes": caps.volumes,
                             "supports_pause_resume": caps.pause_resume,
                             "supports_reconnect": caps.reconnect, **caps.as_dict()},
        }

    # -- timing ---------------------------------------------------------------------------

    def attempt(self, fn: Callable[[], Any],
                limit: float | None = None) -> tuple[Any, BaseException | None, int]:
        """(value, None, ms), or (None, the error, ms): a step never raises."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None, OutOfBudget(), 0
        started = time.monotonic()
        try:
            value = bounded(fn, min(remaining, limit) if limit else remaining)
            error: BaseException | None = None
        except BackendTimeout as exc:
            spent = time.monotonic() >= self.deadline
            error = BackendTimeout(f"{exc.reason}: the check's {BUDGET_SEC} s budget ran out"
                                   if spent else exc.reason)
            value = None
        except BackendError as exc:
            value, error = None, exc
        except Exception as exc:  # noqa: BLE001 - a backend bug is a failed row, not a crash
            log.exception("sandbox check step failed unexpectedly")
            value, error = None, BackendError(f"unexpected error ({type(exc).__name__})")
        return value, error, int((time.monotonic() - started) * 1000)

    def failed(self, name: str, exc: BaseException, latency: int,
               message: str | None = None) -> Check:
        """The row of a step that raised: out of budget is a skip, anything else a failure."""
        if isinstance(exc, OutOfBudget):
            return self.add(Check(name, None, f"Not run: the check's {BUDGET_SEC} s budget "
                                  "ran out.", OUT_OF_BUDGET))
        if isinstance(exc, Unsupported) and message is None:
            return self.add(Check(name, None, self.human(exc), NOT_SUPPORTED, latency))
        return self.add(Check(name, False, message or self.human(exc), latency_ms=latency))

    # -- the steps, in reference order ------------------------------------------------------

    def steps(self, backend: Backend) -> None:
        if not self.reach_control_plane() or not self.credentials(backend):
            return
        template_ok = self.template(backend)
        if not self.deep:
            self.skip(NEEDS_DEEP, "Run the deep check to create a sandbox.", EXEC, EGRESS, CANARY)
        elif not template_ok:
            self.skip(NOT_CREATED, "Not attempted: the template check did not pass.",
                      EXEC, EGRESS, CANARY)
        else:
            self.deep_check(backend)

    def reach_control_plane(self) -> bool:
        """Health of the control plane alone (Docker: a ping, without the image check)."""
        error, latency = None, 0
        try:
            plain = backend_for(_without_template(self.doc))
        except BackendError as exc:
            plain, error = None, exc
        if plain is not None:
            try:
                _, error, latency = self.attempt(plain.health)
            finally:
                plain.close()
        if isinstance(error, BackendAuthError):  # it answered, and refused us
            self.add(Check(API_URL, True, f"{self.where()} answered", latency_ms=latency))
            self.add(Check(CREDENTIAL, False, self.human(error), latency_ms=latency))
            self.skip(CREDENTIALS_REJECTED, "Not checked: the credentials were rejected.",
                      TEMPLATE, EXEC, EGRESS, CANARY)
            return False
        if error is not None:
            self.failed(API_URL, error, latency)
            self.skip(UNREACHABLE, "Not checked: the control plane is not reachable.",
                      CREDENTIAL, TEMPLATE, EXEC, EGRESS, CANARY)
            return False
        self.add(Check(API_URL, True, f"{self.where()} answered in {latency} ms",
                       latency_ms=latency))
        return True

    def credentials(self, backend: Backend) -> bool:
        """An authenticated list call (for Docker: the engine's container list)."""
        _, error, latency = self.attempt(lambda: backend.list(
            {"sandlot_tenant_id": self.metadata["sandlot_tenant_id"],
             "sandlot_purpose": "check"}))
        if error is not None:
            self.failed(CREDENTIAL, error, latency)
            auth = isinstance(error, BackendAuthError)
            self.skip(CREDENTIALS_REJECTED if auth else UNREACHABLE,
                      "Not checked: the authenticated call failed.", TEMPLATE, EXEC, EGRESS,
                      CANARY)
            return False
        what = "the engine" if self.kind == "docker" else "the API"
        self.add(Check(CREDENTIAL, True, f"{what} accepted an authenticated list call",
                       latency_ms=latency))
        return True

    def template(self, backend: Backend) -> bool:
        """Docker: the image is on the engine; E2B/Cube: the catalog has it, ready."""
        name = sandbox_doc.template_of(self.doc)
        if not name:
            noun = "image" if self.kind == "docker" else "template"
            self.add(Check(TEMPLATE, None, f"No {noun} set yet: pick one before saving.",
                           TEMPLATE_NOT_SET))
            return False
        if self.kind == "docker":  # health() with the image set: ping + inspect the image
            _, error, latency = self.attempt(backend.health)
            message = f"image {name} is on the engine"
        else:
            templates, error, latency = self.attempt(backend.list_templates)
            found = next((t for t in templates or () if name in (t.id, t.name)), None)
            if error is None and (found is None or found.status != "ready"):
                self.add(Check(TEMPLATE, False, _template_problem(name, found),
                               latency_ms=latency))
                return False
            message = f"template {name} is in the catalog and ready"
        if error is not None:
            return self.failed(TEMPLATE, error, latency).reason == NOT_SUPPORTED
        self.add(Check(TEMPLATE, True, message, latency_ms=latency))
        return True

    def deep_check(self, backend: Backend) -> None:
        """Create a sandbox under the config's policy, run a command, probe egress; the
        sandbox is deleted whatever happens."""
        self.sweep(backend)
        spec = sandbox_doc.spec_for(self.doc, self.metadata, timeout_sec=SANDBOX_TTL_SEC)
        creation = Creation(backend, spec)
        info, error, created_ms = self.attempt(creation)
        sandbox_id = info.id if info is not None else creation.abandon()
        try:
            if error is not None:
                self.failed(EXEC, error, created_ms, None if isinstance(error, OutOfBudget)
                            else "Could not create a sandbox: " + self.explain(backend, error))
                self.skip(NOT_CREATED, "Not run: no sandbox was created.", EGRESS, CANARY)
            elif self.sandbox_exec(backend, info.id, created_ms):
                self.egress(backend, info.id)
            else:
                self.skip(EXEC_FAILED, "Not run: the command in the sandbox failed.",
                          EGRESS, CANARY)
        finally:
            if sandbox_id:
                delete_quietly(backend, sandbox_id)

    def sandbox_exec(self, backend: Backend, sandbox_id: str, created_ms: int) -> bool:
        result, error, latency = self.attempt(lambda: backend.exec(
            sandbox_id, f"echo {EXEC_MARK}", timeout_sec=EXEC_TIMEOUT_SEC),
            limit=EXEC_TIMEOUT_SEC + 10)
        latency += created_ms
        if error is not None:
            self.failed(EXEC, error, latency, None if isinstance(error, OutOfBudget) else
                        "The sandbox was created, but the command failed: " + self.human(error))
            return False
        if result.exit_code == 0 and EXEC_MARK in result.stdout:
            self.add(Check(EXEC, True, f"created a sandbox in {created_ms} ms and ran "
                           f"`echo {EXEC_MARK}` in it (exit 0)", latency_ms=latency))
            return True
        first = (result.stderr.strip().splitlines() or [""])[0][:200]
        self.add(Check(EXEC, False, f"`echo {EXEC_MARK}` exited {result.exit_code}"
                       + (f": {first}" if first else ""), latency_ms=latency))
        return False

    def egress(self, backend: Backend, sandbox_id: str) -> None:
        """One exec probes every URL and the canary target at once."""
        target = probe.denied_target(self.doc, self.urls) if self.canary else None
        urls = [*self.urls, *([target] if target and target not in self.urls else [])]
        if not urls:
            self.add(Check(EGRESS, None, "No probe URLs are configured "
                           "(SANDBOX_EGRESS_PROBE_URLS).", NOT_SUPPORTED))
            self.canary_row(None, 0)
            return
        seconds = probe.exec_timeout(urls)
        result, error, latency = self.attempt(lambda: backend.exec(
            sandbox_id, probe.command(urls), timeout_sec=seconds), limit=seconds + 10)
        probes = probe.parse(result.stdout, urls) if error is None else None
        if error is not None:
            self.failed(EGRESS, error, latency)
            self.canary_row(None, 0, "Not run: the egress probe failed.", EXEC_FAILED)
        elif probes is None:
            self.add(Check(EGRESS, False, "The sandbox image has neither python3 nor curl to "
                           "probe with.", latency_ms=latency))
            self.canary_row(None, latency, "Not run: nothing to probe with.", NOT_SUPPORTED)
        else:
            by_url = {p.url: p for p in probes}
            ok, message, restricted = probe.egress_verdict(
                self.doc, [by_url[u] for u in self.urls if u in by_url])
            self.add(Check(EGRESS, ok, message, RESTRICTED if restricted else "", latency))
            self.canary_row(by_url.get(target) if target else None, latency)

    def canary_row(self, result: probe.Probe | None, latency: int, message: str = "",
                   reason: str = NO_DENIED_TARGET) -> None:
        """decisions 6: when the policy denies something, a denied target must fail."""
        if not self.canary:
            return
        if result is None:
            self.add(Check(CANARY, None, message or "The policy denies nothing the check can "
                           "probe: every probe URL is allowed.", reason, latency))
            return
        ok, text = probe.canary_verdict(result)
        self.add(Check(CANARY, ok, text, latency_ms=latency))

    def sweep(self, backend: Backend) -> None:
        """Delete this config's check sandboxes older than their TTL (a crashed check)."""
        scope = {k: self.metadata[k] for k in ("sandlot_tenant_id", "sandlot_sandbox_config_id")}
        found, error, _ = self.attempt(
            lambda: backend.list({**scope, "sandlot_purpose": "check"}), limit=10)
        cutoff = time.time() - SANDBOX_TTL_SEC - CLEANUP_TIMEOUT_SEC
        for sandbox in found if error is None else ():
            if _epoch(sandbox.started_at) < cutoff:
                delete_quietly(backend, sandbox.id)

    # -- messages -------------------------------------------------------------------------

    def explain(self, backend: Backend, error: BaseException) -> str:
        """A 404 on create (E2B/Cube): ask the template catalog why (reference 5.4)."""
        message = self.human(error)
        if self.kind == "docker" or not isinstance(error, SandboxNotFound):
            return message
        name = sandbox_doc.template_of(self.doc)
        templates, failed, _ = self.attempt(backend.list_templates, limit=15)
        if failed is not None:
            return message
        found = next((t for t in templates if name in (t.id, t.name)), None)
        if found is not None and found.status == "ready":
            return (f"template {name} is in the catalog but the API did not find it: it may "
                    "belong to another team than this key's")
        return _template_problem(name, found)

    def where(self) -> str:
        block = self.doc.get(self.kind) or {}
        if self.kind == "docker":
            return f"Docker engine at {block.get('host') or 'unix:///var/run/docker.sock'}"
        name = "E2B" if self.kind == "e2b" else "Cube"
        return f"{name} API at {block.get('api_url') or 'the default endpoint'}"

    def human(self, exc: BaseException) -> str:
        """A backend failure as a sentence an admin can act on (reference 5.4)."""
        reason = getattr(exc, "reason", "") or str(exc)
        docker = self.kind == "docker"
        if isinstance(exc, BackendUnavailable):
            hint = (" — is the Docker socket mounted, and is the host setting (DOCKER_HOST) "
                    "right?" if docker else " — check api_url and that this server reaches it")
            if "not reachable" not in reason:
                reason = f"{self.where()} not reachable: {reason}"
            return reason + hint
        if isinstance(exc, BackendAuthError):
            who = "TLS client certificate" if docker else "API key (wrong key or team?)"
            return f"Credentials rejected: {reason} (check the {who})"
        prefixes = ((BackendTimeout, "Timed out"), (QuotaExceeded, "Capacity or quota exhausted"),
                    (Unsupported, "Not supported"), (SandboxNotFound, "Not found"))
        for kind, prefix in prefixes:
            if isinstance(exc, kind):
                return f"{prefix}: {reason}"
        return reason


def _client_problem(doc: dict[str, Any]) -> None:
    """What makes a client impossible to build before any I/O (a missing cert dir)."""
    block = doc.get("docker") or {}
    path = block.get("tls_cert_path") if doc["sandbox_type"] == "docker" else ""
    if path:
        missing = [n for n in ("ca.pem", "cert.pem", "key.pem")
                   if not os.path.isfile(os.path.join(path, n))]
        if missing:
            raise BackendError(f"TLS files missing in {path}: {', '.join(missing)}")


def _without_template(doc: dict[str, Any]) -> dict[str, Any]:
    kind = doc["sandbox_type"]
    block = dict(doc.get(kind) or {})
    block["image" if kind == "docker" else "template_id"] = ""
    return {**doc, kind: block}


def _template_problem(name: str, found: Any) -> str:
    if found is None:
        return f"template {name} is not in the catalog: build it or pick another"
    if found.status in ("building", "pending"):
        return f"template {name} is still {found.status}: try again when it is ready"
    return f"template {name} is {found.status}: rebuild it"


def _epoch(stamp: str | None) -> float:
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0
    except ValueError:
        return 0.0


def _secret_values(doc: dict[str, Any]) -> list[str]:
    """Every secret the document holds, longest first (so none is half-masked)."""
    values = [str((doc.get(k) or {}).get("api_key") or "") for k in ("e2b", "cube")]
    values += [str(v) for v in (doc.get("env_vars") or {}).values()]
    network = doc.get("network") or {}
    for rule in network.get("cube_rules") or []:
        values += [str(i.get("secret") or "") for i in rule.get("inject") or []]
    for rule in network.get("e2b_host_rules") or []:
        values += [str(v) for v in (rule.get("headers") or {}).values()]
    return sorted({v for v in values if len(v) >= 3}, key=len, reverse=True)
