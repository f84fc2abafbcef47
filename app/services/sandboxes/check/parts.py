"""The pieces of a sandbox check: row names and skip reasons, the row itself, bounded
calls, the check sandbox's creation, and the sentences an admin reads (reference 5.4)."""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
from app.services.sandboxes import endpoints

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


def where(doc: dict[str, Any]) -> str:
    """The control plane a config talks to, as tenants read it: by field or engine name,
    never by address (the address may be the operator's, decisions 11)."""
    block = doc.get(doc["sandbox_type"]) or {}
    if doc["sandbox_type"] == "docker":
        return f"The Docker engine “{endpoints.engine_of(block)}”"
    name = "E2B" if doc["sandbox_type"] == "e2b" else "Cube"
    return f"The {name} API ({'api_url' if block.get('api_url') else 'default endpoint'})"


def human(doc: dict[str, Any], exc: BaseException) -> str:
    """A backend failure as a sentence an admin can act on (reference 5.4), without the
    low-level detail (addresses, ports, paths, errno text): a connection failure is a
    sentence and a reference id; the detail goes to the operator's log under that id."""
    reason = getattr(exc, "reason", "") or str(exc)
    docker = doc["sandbox_type"] == "docker"
    if isinstance(exc, BackendUnavailable):
        hint = ("; ask the operator whether the engine is up" if docker
                else "; check api_url and that it is reachable from this server")
        return opaque(exc, f"{where(doc)} could not be reached{hint}")
    if isinstance(exc, BackendAuthError):
        if docker:  # the engine's TLS files are the operator's
            return opaque(exc, "Credentials rejected: the Docker engine refused this "
                          "server's TLS client certificate; tell the operator")
        return f"Credentials rejected: {conceal(doc, reason)} (check the API key: wrong key " \
            "or team?)"
    prefixes = ((BackendTimeout, "Timed out"), (QuotaExceeded, "Capacity or quota exhausted"),
                (Unsupported, "Not supported"), (SandboxNotFound, "Not found"))
    for kind, prefix in prefixes:
        if isinstance(exc, kind):
            return f"{prefix}: {conceal(doc, reason)}"
    return conceal(doc, reason)


def opaque(exc: BaseException, sentence: str) -> str:
    """`sentence` with a reference id; the full reason is logged under that id."""
    ref = secrets.token_hex(4)
    log.warning("sandbox check failure ref=%s %s: %s", ref, type(exc).__name__,
                getattr(exc, "reason", "") or exc)
    return f"{sentence} (reference {ref}: the operator's log has the detail)."


# Low-level detail that maps the operator's network: URLs, IP addresses (with ports),
# host:port pairs, absolute paths, errno text.
_DETAIL = re.compile(
    r"[a-z][a-z0-9+.-]*://\S+"                          # URLs, unix:// sockets
    r"|\[[0-9a-fA-F:.]+\](?::\d+)?"                       # [v6]:port
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"              # v4[:port]
    r"|\b(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{0,4}\b"     # bare v6
    r"|\b(?:[0-9a-fA-F]{1,4}:)+:(?:[0-9a-fA-F]{1,4}\b)?"   # compressed v6 (fd12:3456::7)
    r"|\b[\w.-]+:\d{2,5}\b"                              # host:port
    r"|(?<![\w.])/[\w.@+-]+(?:/[\w.@+-]*)+"                # /absolute/paths
    r"|\[Errno[^\]]*\][^,;)]*", re.IGNORECASE)


def conceal(doc: dict[str, Any] | None, text: str) -> str:
    """`text` with the config's addresses named by field and any other address, port,
    path or errno detail replaced by "(detail hidden)"."""
    block = (doc.get(doc["sandbox_type"]) or {}) if doc else {}
    for name in ("api_url", "proxy_url"):
        url = str(block.get(name) or "").strip().rstrip("/")
        if url:
            text = text.replace(url, name)
    return _DETAIL.sub("(detail hidden)", text)


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
        return f"template {name} is not in the catalog: build it or pick another"
    if found.status in ("building", "pending"):
        return f"template {name} is still {found.status}: try again when it is ready"
    if found.status == "untagged":
        # Reference 5.4: a create resolves the `default` tag, so this one never boots.
        return (f"template {name} was built without the `default` tag, so it will never "
                "become ready: rebuild it")
    return f"template {name} is {found.status}: rebuild it"


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
