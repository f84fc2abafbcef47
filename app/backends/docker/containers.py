"""Our containers as the engine describes them: the labels a new one carries, and the
SandboxInfo an inspect or a list row reads as (state, sandlot_* metadata, creation time).

Pure: no engine calls.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.backends.base import METADATA_PREFIX, SandboxInfo, SandboxState

STATES = {
    "running": SandboxState.running,
    "paused": SandboxState.paused,
    "created": SandboxState.transitioning,
    "restarting": SandboxState.transitioning,
    "removing": SandboxState.terminal,
    "exited": SandboxState.terminal,
    "dead": SandboxState.terminal,
}


def iso(created: Any) -> str | None:
    """Creation time as ISO 8601 UTC to the second (list gives epoch, inspect RFC 3339)."""
    if isinstance(created, int | float):
        return datetime.fromtimestamp(int(created), UTC).isoformat()
    if isinstance(created, str) and len(created) >= 19:
        return datetime.strptime(created[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=UTC).isoformat()
    return None


def metadata_of(labels: dict[str, str] | None) -> dict[str, str]:
    """Our labels; an empty value is a label masked at create (see `labels_for`)."""
    return {k: v for k, v in (labels or {}).items() if k.startswith(METADATA_PREFIX) and v}


def labels_for(metadata: dict[str, str], image: dict[str, Any]) -> dict[str, str]:
    """Container labels: the metadata, with sandlot_* labels a snapshot image carries
    from its parent sandbox masked to "", since Docker merges image labels in and
    cannot drop them (a child must never match its parent's session)."""
    inherited = (image.get("Config") or {}).get("Labels") or {}
    masked = {key: "" for key in inherited if key.startswith(METADATA_PREFIX)}
    return {**masked, **metadata}


def info(status: str, data: dict[str, Any], labels: dict[str, str] | None,
         image: str) -> SandboxInfo:
    return SandboxInfo(id=data["Id"], state=STATES.get(status, SandboxState.unknown),
                       metadata=metadata_of(labels), template=image,
                       started_at=iso(data.get("Created")))


def from_inspect(data: dict[str, Any]) -> SandboxInfo:
    config = data["Config"]
    return info(data["State"]["Status"], data, config.get("Labels"), config["Image"])


def from_summary(row: dict[str, Any]) -> SandboxInfo:
    return info(row.get("State", ""), row, row.get("Labels"), row.get("Image", ""))
