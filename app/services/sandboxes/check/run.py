"""Running one sandbox check: the rows of reference 5.3 in order, within the 90 s budget.

Every backend call runs on a helper thread waited for at most the budget left, so a
provider that hangs costs one failed row, not the job. A deep check's sandbox is
deleted in a `finally`, and one created after the check stopped waiting deletes itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from app.backends import registry
from app.backends.base import (
    Backend,
    BackendAuthError,
    BackendError,
    BackendTimeout,
    SandboxNotFound,
    Unsupported,
)
from app.services.job_limits import CHECK_BUDGET_SEC, CHECK_CLEANUP_SEC, OutOfBudget, bounded
from app.services.sandboxes import document, egress_daemons, endpoints
from app.services.sandboxes.check import probe
from app.services.sandboxes.check.parts import (
    API_URL,
    CANARY,
    CLIENT_BUILD,
    CREDENTIAL,
    CREDENTIALS_REJECTED,
    EGRESS,
    EXEC,
    EXEC_FAILED,
    EXEC_MARK,
    EXEC_TIMEOUT_SEC,
    GATEWAY,
    NEEDS_DEEP,
    NO_DENIED_TARGET,
    NOT_CREATED,
    NOT_SUPPORTED,
    OUT_OF_BUDGET,
    RESTRICTED,
    SANDBOX_TTL_SEC,
    TEMPLATE,
    TEMPLATE_NOT_SET,
    UNREACHABLE,
    Check,
    Creation,
    Report,
    client_problem,
    delete_quietly,
    epoch,
    secret_values,
    template_problem,
    without_template,
)
from app.services.sandboxes.incidents import human, where
from app.services.sandboxes.provider import backend_for, labels

log = logging.getLogger("sandlot.sandbox_check")


class Run:
    """One check: the rows so far, the budget, and the steps in reference order."""

    def __init__(self, doc: dict[str, Any], deep: bool, metadata: dict[str, str],
                 urls: list[str], report: Report | None, budget_sec: float = CHECK_BUDGET_SEC):
        self.doc, self.deep, self.metadata, self.urls = doc, deep, metadata, urls
        self.kind = doc["sandbox_type"]
        self.report = report
        self.deadline = time.monotonic() + budget_sec
        self.secrets = secret_values(doc)
        self.rows: list[Check] = []
        self.canary = probe.denies_anything(doc)
        self.gateway_down = self._gateway_down()
        # rows: the gateway when it is down, control plane .. egress, then the canary
        self.total = int(self.gateway_down is not None) + 5 + int(self.canary)
        self.capabilities = registry.capabilities_for(self.kind)

    def _gateway_down(self) -> Check | None:
        """Docker's egress gateway on this host, when it is down while sandboxes of this
        config run: they have no network until it is back (it fails closed). Like
        client_build, the row appears only then, first."""
        if not egress_daemons.gateway_applies(self.doc):
            return None
        config = {key: self.metadata[key] for key in ("sandlot_tenant_id",
                                                      "sandlot_sandbox_config_id")
                  if key in self.metadata}
        status = egress_daemons.gateway_status(config)
        if status.running or not status.sandboxes:
            return None
        count = ("1 running sandbox of this config has" if status.sandboxes == 1 else
                 f"{status.sandboxes} running sandboxes of this config have")
        return Check(GATEWAY, False, f"The egress gateway is down: {count} no network until "
                     "it is back. Sandlot starts it again within a minute, or at the next "
                     "command.")

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
            reason = OUT_OF_BUDGET
            message = f"Not run: the check's {CHECK_BUDGET_SEC} s budget ran out."
        for name in names:
            if name != CANARY or self.canary:
                self.add(Check(name, None, message, reason))

    def result(self) -> dict[str, Any]:
        """Build the client, run the steps, and answer as reference 5.2."""
        try:
            client_problem(self.doc)
            backend = backend_for(self.doc)
        except BackendError as exc:  # nothing else runs (reference 5.3)
            self.add(Check(CLIENT_BUILD, False, human(self.doc, exc)))
            return self.response()
        self.capabilities = backend.capabilities
        if self.gateway_down is not None:
            self.add(self.gateway_down)
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
            error = BackendTimeout(f"{exc.reason}: the check's {CHECK_BUDGET_SEC} s budget ran out"
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
            return self.add(Check(name, None, f"Not run: the check's {CHECK_BUDGET_SEC} s budget "
                                  "ran out.", OUT_OF_BUDGET))
        if isinstance(exc, Unsupported) and message is None:
            return self.add(Check(name, None, human(self.doc, exc), NOT_SUPPORTED, latency))
        return self.add(Check(name, False, message or human(self.doc, exc), latency_ms=latency))

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
            plain = backend_for(without_template(self.doc))
        except BackendError as exc:
            plain, error = None, exc
        if plain is not None:
            try:
                _, error, latency = self.attempt(plain.health)
            finally:
                plain.close()
        if isinstance(error, BackendAuthError):  # it answered, and refused us
            self.add(Check(API_URL, True, f"{where(self.doc)} answered.", latency_ms=latency))
            self.add(Check(CREDENTIAL, False, human(self.doc, error), latency_ms=latency))
            self.skip(CREDENTIALS_REJECTED, "Not checked: the credentials were rejected.",
                      TEMPLATE, EXEC, EGRESS, CANARY)
            return False
        if error is not None:
            self.failed(API_URL, error, latency)
            self.skip(UNREACHABLE, "Not checked: the control plane is not reachable.",
                      CREDENTIAL, TEMPLATE, EXEC, EGRESS, CANARY)
            return False
        self.add(Check(API_URL, True, f"{where(self.doc)} answered in {latency} ms.",
                       latency_ms=latency))
        return True

    def credentials(self, backend: Backend) -> bool:
        """An authenticated list call (for Docker: the engine's container list)."""
        _, error, latency = self.attempt(lambda: backend.list(
            labels(self.metadata["sandlot_tenant_id"], purpose="check")))
        if error is not None:
            self.failed(CREDENTIAL, error, latency)
            auth = isinstance(error, BackendAuthError)
            self.skip(CREDENTIALS_REJECTED if auth else UNREACHABLE,
                      "Not checked: the authenticated call failed.", TEMPLATE, EXEC, EGRESS,
                      CANARY)
            return False
        self.add(Check(CREDENTIAL, True, self.access_granted(), latency_ms=latency))
        return True

    def access_granted(self) -> str:
        """What the list call proved, in plain words: a local engine takes no credentials."""
        if self.kind != "docker":
            return "The API accepted the API key (it listed sandboxes)."
        engine = endpoints.engine(endpoints.engine_of(self.doc.get("docker") or {}))
        if engine is not None and engine.tls_dir:
            return "The engine accepted this server's TLS certificate (it listed containers)."
        return "The engine listed its containers; a local engine needs no credentials."

    def template(self, backend: Backend) -> bool:
        """Docker: the image is on the engine; E2B/Cube: the catalog has it, ready."""
        name = document.template_of(self.doc)
        if not name:
            noun = "image" if self.kind == "docker" else "template"
            self.add(Check(TEMPLATE, None, f"No {noun} set yet: pick one before saving.",
                           TEMPLATE_NOT_SET))
            return False
        if self.kind == "docker":  # health() with the image set: ping + inspect the image
            _, error, latency = self.attempt(backend.health)
            message = f"Image {name} is on the engine."
        else:
            templates, error, latency = self.attempt(backend.list_templates)
            found = next((t for t in templates or () if name in (t.id, t.name)), None)
            if error is None and (found is None or found.status != "ready"):
                self.add(Check(TEMPLATE, False, template_problem(name, found),
                               latency_ms=latency))
                return False
            message = f"Template {name} is in the catalog and ready."
        if error is not None:
            return self.failed(TEMPLATE, error, latency).reason == NOT_SUPPORTED
        self.add(Check(TEMPLATE, True, message, latency_ms=latency))
        return True

    def deep_check(self, backend: Backend) -> None:
        """Create a sandbox under the config's policy, run a command, probe egress; the
        sandbox is deleted whatever happens."""
        self.sweep(backend)
        spec = document.spec_for(self.doc, self.metadata, timeout_sec=SANDBOX_TTL_SEC)
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
            message = "The sandbox was created, but the command failed: " + human(self.doc, error)
            self.failed(EXEC, error, latency, None if isinstance(error, OutOfBudget) else message)
            return False
        if result.exit_code == 0 and EXEC_MARK in result.stdout:
            self.add(Check(EXEC, True, f"Created a sandbox in {created_ms} ms and ran "
                           f"`echo {EXEC_MARK}` in it (exit 0).", latency_ms=latency))
            return True
        first = (result.stderr.strip().splitlines() or [""])[0][:200]
        self.add(Check(EXEC, False, f"`echo {EXEC_MARK}` exited {result.exit_code}"
                       + (f": {first}" if first else ""), latency_ms=latency))
        return False

    def egress(self, backend: Backend, sandbox_id: str) -> None:
        """One exec probes every URL and the canary target at once."""
        target = probe.denied_target(self.doc, self.urls) if self.canary else None
        allowed = probe.allowed_urls(self.doc, self.urls)
        general = [u for u in self.urls if u not in allowed]
        urls = list(dict.fromkeys([*allowed, *general, *([target] if target else [])]))
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
            verdict = probe.egress_verdict(self.doc, [by_url[u] for u in allowed if u in by_url],
                                           [by_url[u] for u in general if u in by_url])
            self.add(Check(EGRESS, verdict.ok, verdict.message,
                           RESTRICTED if verdict.ok is None else "", latency, verdict.targets))
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
        scope = labels(self.metadata["sandlot_tenant_id"],
                       config_id=self.metadata["sandlot_sandbox_config_id"], purpose="check")
        found, error, _ = self.attempt(lambda: backend.list(scope), limit=10)
        cutoff = time.time() - SANDBOX_TTL_SEC - CHECK_CLEANUP_SEC
        for sandbox in found if error is None else ():
            if time.monotonic() >= self.deadline:
                return  # the next check sweeps the rest; the job must end within its limit
            if epoch(sandbox.started_at) < cutoff:
                delete_quietly(backend, sandbox.id)

    # -- messages -------------------------------------------------------------------------

    def explain(self, backend: Backend, error: BaseException) -> str:
        """A 404 on create (E2B/Cube): ask the template catalog why (reference 5.4)."""
        message = human(self.doc, error)
        if self.kind == "docker" or not isinstance(error, SandboxNotFound):
            return message
        name = document.template_of(self.doc)
        templates, failed, _ = self.attempt(backend.list_templates, limit=15)
        if failed is not None:
            return message
        found = next((t for t in templates if name in (t.id, t.name)), None)
        if found is not None and found.status == "ready":
            return (f"Template {name} is in the catalog but the API did not find it: it may "
                    "belong to another team than this key's.")
        return template_problem(name, found)
