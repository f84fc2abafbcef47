"""Provider failures as a member reads them: a sentence they can act on and a reference
id. The detail (the provider's own reason) goes to the log under that id, and, for a
config, to its admins: the config's editor lists the recent failures by reference.

A member never reads the provider's reason: it can carry the operator's addresses, ports
and file paths (decisions 11). Admins read it with those concealed (`conceal`, below).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select

from app.backends.base import (
    BackendAuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    EngineWithoutNode,
    QuotaExceeded,
    SandboxNotFound,
    Unsupported,
)
from app.errors import Unavailable
from app.extensions import db
from app.models import AuditEvent, SandboxConfig, Tenant
from app.services import audit
from app.services.sandboxes import endpoints

log = logging.getLogger("sandlot.incidents")
# The sentences below log under the check's name, where operators have always found them.
check_log = logging.getLogger("sandlot.sandbox_check")

ACTION = "sandbox_config.provider_failed"
AGAIN = "Try again in a few minutes; if it keeps failing, give an admin this reference"
SENTENCES: list[tuple[type[BackendError], str]] = [
    (BackendAuthError, "The sandbox service refused this workspace's credentials. Ask an "
                       "admin to check the sandbox config's API key; give them this reference"),
    (QuotaExceeded, "The sandbox service has no capacity for this workspace right now. "
                    f"{AGAIN}"),
    (BackendTimeout, f"The sandbox service did not answer in time. {AGAIN}"),
    (EngineWithoutNode, "This config's Docker engine has no node running right now, so "
                        f"nothing can run on it. {AGAIN}"),
    (BackendUnavailable, f"The sandbox service could not be reached. {AGAIN}"),
    (SandboxNotFound, "The sandbox is gone (it may have expired). Start a new session; if "
                      "it happens again, give an admin this reference"),
    (Unsupported, "This sandbox config does not support that. Ask an admin about it, with "
                  "this reference"),
]
GENERIC = f"The sandbox service reported an error. {AGAIN}"


def new_reference() -> str:
    """A short id a member can quote and an operator can grep for."""
    return secrets.token_hex(4)


def sentence(exc: BaseException, ref: str) -> str:
    """What a member reads for `exc`: what happened, what to do, and the reference."""
    text = next((s for kind, s in SENTENCES if isinstance(exc, kind)), GENERIC)
    return f"{text}: {ref}."


def provider_failed(exc: BackendError, config: SandboxConfig | None, what: str,
                    tenant: Tenant | None = None) -> Unavailable:
    """Log `exc` under a new reference, tell the config's admins, and return the error the
    member gets (503 `unavailable`, the reference also in `data`). Commits its note in a
    transaction of its own: the caller's work has been rolled back."""
    ref = new_reference()
    log.warning("provider failure ref=%s config=%s during %s: %s: %s", ref,
                config.id if config is not None else "-", what, type(exc).__name__,
                getattr(exc, "reason", "") or exc)
    if config is not None:
        _note(config, tenant, ref, what, exc)
    return Unavailable(sentence(exc, ref), data={"reference": ref})


def _note(config: SandboxConfig, tenant: Tenant | None, ref: str, what: str,
          exc: BackendError) -> None:
    try:
        db.session.rollback()
        tenant = tenant or db.session.get(Tenant, config.tenant_id)
        if tenant is None:
            return
        reason = conceal(config.config, getattr(exc, "reason", "") or
                                             str(exc))
        audit.record(tenant, audit.SystemActor("sandbox provider"), ACTION, "sandbox_config",
                     config.id, {"reference": ref, "during": what, "kind": type(exc).__name__,
                                 "detail": reason[:500]})
        db.session.commit()
    except Exception:  # noqa: BLE001 - the note is a courtesy; the member's error stands
        db.session.rollback()
        log.exception("could not record provider failure ref=%s", ref)


KIND_WORDS = {"BackendUnavailable": "Not reachable", "BackendTimeout": "Timed out",
              "BackendAuthError": "Credentials refused", "QuotaExceeded": "No capacity",
              "SandboxNotFound": "Sandbox gone", "Unsupported": "Not supported"}


def recent_failures(config: SandboxConfig, limit: int = 5) -> list[dict[str, Any]]:
    """The config's latest provider failures members met, newest first, for its admins."""
    rows = db.session.scalars(
        select(AuditEvent).where(AuditEvent.tenant_id == config.tenant_id,
                                 AuditEvent.action == ACTION,
                                 AuditEvent.object_id == config.id)
        .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc()).limit(limit))
    return [{"at": row.created_at, **{k: str(row.data.get(k, "")) for k in
                                       ("reference", "during", "detail")},
             "kind": KIND_WORDS.get(str(row.data.get("kind")), "Provider error")}
            for row in rows]



class ProviderFailed(Unavailable):
    """A provider call failed; the message is `human`'s sentence for an admin. What entry
    points catch, so they never need a backend's own error type."""

    def __init__(self, sentence: str):
        super().__init__(sentence)
        self.sentence = sentence  # exactly `human`'s, even when that is empty


@contextmanager
def worded(doc: dict[str, Any]) -> Iterator[None]:
    """Provider failures inside the block re-raised as ProviderFailed, worded for `doc`."""
    try:
        yield
    except BackendError as exc:
        raise ProviderFailed(human(doc, exc)) from exc


# -- wording for admins: sentences without the operator's addresses (reference 5.4) -------

def where(doc: dict[str, Any]) -> str:
    """The control plane a config talks to, as tenants read it: by field or engine name,
    never by address (the address may be the operator's, decisions 11)."""
    block = doc.get(doc["sandbox_type"]) or {}
    if doc["sandbox_type"] == "docker":
        return f"The Docker engine “{endpoints.engine_of(block)}”"
    name = "E2B" if doc["sandbox_type"] == "e2b" else "Cube"
    return f"The {name} API ({'its API URL' if block.get('api_url') else 'default endpoint'})"


def human(doc: dict[str, Any], exc: BaseException) -> str:
    """A backend failure as a sentence an admin can act on (reference 5.4), without the
    low-level detail (addresses, ports, paths, errno text): a connection failure is a
    sentence and a reference id; the detail goes to the operator's log under that id."""
    reason = getattr(exc, "reason", "") or str(exc)
    docker = doc["sandbox_type"] == "docker"
    if isinstance(exc, EngineWithoutNode):
        return reason
    if isinstance(exc, BackendUnavailable):
        hint = ("; ask the operator whether the engine is up" if docker
                else "; check the API URL and that it is reachable from this server")
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
    check_log.warning("sandbox check failure ref=%s %s: %s", ref, type(exc).__name__,
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
    """`text` with the config's addresses named by their labels and any other address,
    port, path or errno detail replaced by "(detail hidden)"."""
    block = (doc.get(doc["sandbox_type"]) or {}) if doc else {}
    for name, label in (("api_url", "the API URL"), ("proxy_url", "the Proxy URL")):
        url = str(block.get(name) or "").strip().rstrip("/")
        if url:
            text = text.replace(url, label)
    return _DETAIL.sub("(detail hidden)", text)
