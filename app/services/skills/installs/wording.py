"""Install stages as sentences people read (issue 27 item 2). The API keeps the reference's
stage names (`agent`, `seeded`, ...); pages say what happens ("Running install.sh",
"Files copied"), never a raw name with its percent."""

from __future__ import annotations

import re

from app.services.skills.installs import plan

STAGE_SENTENCES = {
    "accepted": "Accepted, waiting to start",
    "sandbox_ready": "Maintenance sandbox started",
    "seeding": "Copying the skill's files into the sandbox",
    "seeded": "Files copied",
    "agent_done": "Install commands finished",
    "verify_note": "Checking what was installed",
    "verified": "Checks done; building the sandbox image",
    "removed": "Files removed; rebuilding the sandbox image",
    "failed": "Failed",
    "detached": "No longer followed",
}
_SEEDING = re.compile(r"^seeding (\d+) files?$")


def sentence(stage: str, log: str | None = None, status: str | None = None) -> str:
    """Stage `stage` (with its `log`, and the `status` a verdict carries) in words."""
    if stage == "agent":
        return plan.label(log)
    if stage == "done":
        return "Uninstalled" if status == "removed" else "Installed and ready"
    if stage == "seeding" and (found := _SEEDING.match(log or "")):
        count = int(found.group(1))
        return f"Copying {count} file{'s' if count != 1 else ''} into the sandbox"
    return STAGE_SENTENCES.get(stage, stage.replace("_", " ").capitalize())
