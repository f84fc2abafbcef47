"""Provider failures as a member reads them: a sentence they can act on and a reference
id. The detail (the provider's own reason) goes to the log under that id, and, for a
config, to its admins: the config's editor lists the recent failures by reference.

A member never reads the provider's reason: it can carry the operator's addresses, ports
and file paths (decisions 11). Admins read it with those concealed (sandbox_check_parts).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from sqlalchemy import select

from app.backends.base import (
    BackendAuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    QuotaExceeded,
    SandboxNotFound,
    Unsupported,
)
from app.errors import Unavailable
from app.extensions import db
from app.models import AuditEvent, SandboxConfig, Tenant
from app.services import audit
from app.services.sandboxes.check import parts as sandbox_check_parts

log = logging.getLogger("sandlot.incidents")

ACTION = "sandbox_config.provider_failed"
AGAIN = "Try again in a few minutes; if it keeps failing, give an admin this reference"
SENTENCES: list[tuple[type[BackendError], str]] = [
    (BackendAuthError, "The sandbox service refused this workspace's credentials. Ask an "
                       "admin to check the sandbox config's API key; give them this reference"),
    (QuotaExceeded, "The sandbox service has no capacity for this workspace right now. "
                    f"{AGAIN}"),
    (BackendTimeout, f"The sandbox service did not answer in time. {AGAIN}"),
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
        reason = sandbox_check_parts.conceal(config.config, getattr(exc, "reason", "") or
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
