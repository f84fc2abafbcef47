"""What the one live status of an installation shows (templates/skills/_status.html): a
card's chip, the result panel after Add or Install, and the Manage drawer all render it
from `status_view`, so one read of a row reads the same everywhere."""

from __future__ import annotations

from typing import Any

from app.models import InstalledSkill, SandboxConfig, SkillInstallEvent
from app.services.skills import catalog as catalog_service
from app.services.skills.installs import plan, stream, wording

BUSY = ("installing", "removing")
LABELS = {"installing": "Installing", "ready": "Ready", "failed": "Failed",
          "removing": "Removing"}


def status_view(install: dict[str, Any], live: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """`install` as the catalog lists it (catalog_service.install_view); `live` is the
    run's frame (stream.current), which an installation in flight needs for its percent
    and the stage in words."""
    status = install["status"]
    busy = status in BUSY and live is not None
    label = LABELS.get(status, status.capitalize())
    sentence = live["sentence"] if busy else ""
    if status == "failed" and install.get("error"):
        sentence = install["error"].strip().splitlines()[0][:160]
    title = f"{install['sandbox_config_name']}: {label.lower()}"
    if busy:
        title += f", {live['percent']}%: {sentence}"
    if install.get("version"):
        title += f", version {install['version']}"
    if not install["enabled"]:
        title += "; disabled, so agents are not offered it"
    if install.get("served"):
        title += (f"; agents keep {install['served']['version'] or 'the previous build'} "
                  "until this build is ready")
    if status == "failed" and install.get("error"):
        title += f". {install['error']}"
    return {"skill_id": install["skill_id"], "status": status, "enabled": install["enabled"],
            "name": install["sandbox_config_name"], "label": label, "busy": busy,
            "percent": live["percent"] if busy else None, "sentence": sentence,
            "title": title[:1000]}


def row_status(row: InstalledSkill, config: SandboxConfig | None,
               live: dict[str, Any] | None = None) -> dict[str, Any]:
    """The status of one row (its live frame read here when it is in flight and none is
    given)."""
    if live is None and str(row.status) in BUSY:
        live = stream.current(row.tenant_id, row)
    return status_view(catalog_service.install_view(row, config), live)


def readable(events: list[SkillInstallEvent]) -> list[dict[str, Any]]:
    """A run's transcript as the drawer shows it: each command with what it does in words,
    the output it printed as one block (it is stored in batches as it comes), and stages
    as sentences, not their API names."""
    entries: list[dict[str, Any]] = []
    for event in events:
        kind = str(event.kind)
        if kind == "output" and entries and entries[-1]["kind"] == "output":
            entries[-1]["text"] += "\n" + event.message
            continue
        entry = {"kind": kind, "text": event.message}
        if kind == "command":
            entry["label"] = plan.label(event.message)
        elif kind == "progress":
            entry = {"kind": "stage", "text": wording.sentence(event.stage, event.message,
                                                               event.status)}
        entries.append(entry)
    return entries
