"""One removal run (reference 7.6), as the `uninstall_skill` job runs it.

accepted 5 -> (a skill that never reached an image: the row goes) | (the last skill: the
image pointer is cleared, generation + 1) | (otherwise: maintenance sandbox from the
current snapshot, sandbox_ready 30 -> skill dir removed, removed 60 -> manifest, cleanup
-> snapshot and switch) -> row soft-deleted -> done 100 (status `removed`).

On failure the row returns to `ready` when the skill is still in the image, else
`failed`; once the pointer has moved the row is not restored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from app.extensions import db
from app.models import (
    InstalledSkill,
    InstallStatus,
    SkillSnapshot,
    SnapshotState,
    SnapshotTrigger,
)
from app.models.types import utcnow
from app.services.personal import values as personal_env
from app.services.sandboxes import document, image
from app.services.skills import store
from app.services.skills.installs import plan
from app.services.skills.installs.run import Run


def uninstall(job_id: str, skill_id: str,
              on_progress: Callable[[int, str], None] | None = None) -> dict[str, Any]:
    """Remove the skill, unless the row is gone or a newer upload flipped it back."""
    row = db.session.get(InstalledSkill, skill_id)
    if row is None or row.deleted_at is not None or row.status != InstallStatus.removing \
            or row.job_id != job_id:
        return {"status": "skipped", "error": "nothing to remove"}
    run = RemovalRun(row, job_id, on_progress)
    run.bind()
    return run.execute(run.steps)


class RemovalRun(Run):
    status = InstallStatus.removing
    first_percent = 5

    def steps(self) -> dict[str, Any]:
        config = self.config()
        db.session.refresh(self.row)
        in_image = self.in_image()
        current = image.current_snapshot(config.config)
        if in_image and current:
            if self.others(config.id):
                self.rebuild_without(config)
            else:
                doc = config.config
                image.switch(config.id, None, image.fingerprint(doc), document.template_of(doc))
                self.switched = True
                image.supersede(config.id, keep=None)
                self.events.note("that was the last skill: new sandboxes boot from the plain "
                                 "template again")
            image.mark_stale(self.config())
        self.forget()
        self.events.emit("done", 100, status="removed")
        return {"status": "removed"}

    def others(self, config_id: str) -> list[InstalledSkill]:
        """Every other live row counts, failed ones too: their old files are in the image."""
        return list(db.session.scalars(select(InstalledSkill).where(
            InstalledSkill.sandbox_config_id == config_id, InstalledSkill.id != self.skill_id,
            InstalledSkill.deleted_at.is_(None))))

    def rebuild_without(self, config) -> None:
        self.boot(config, image.boot_template(config.config), 30)
        self.shell(f"rm -rf -- {plan.skill_dir(self.name)}")
        self.events.emit("removed", 60)
        self.shell(plan.manifest_command(self.name, None))
        self.shell(plan.CLEANUP)
        self.snapshot(config, SnapshotTrigger.remove)

    def forget(self) -> None:
        """Soft-delete the row; its pinned archive goes once nothing names it."""
        bundle_ref = self.row.bundle_ref
        if self.update_row(deleted_at=utcnow(), installing_since=None, env_values=None):
            personal_env.forget_skill(self.skill_id)  # members' values go with it (decisions 9)
            db.session.commit()
        if bundle_ref:
            store.collect(self.tenant_id, bundle_ref)

    def in_image(self) -> bool:
        """Whether an image may hold the skill: it was ready once, or an install run of it
        got as far as a snapshot (one stopped while switching, say)."""
        if self.row.installed_snapshot_id or self.row.served:
            return True
        return db.session.scalar(select(SkillSnapshot.id).where(
            SkillSnapshot.skill_id == self.skill_id,
            SkillSnapshot.state.in_([SnapshotState.active, SnapshotState.superseded]))
            .limit(1)) is not None

    def failure_status(self) -> InstallStatus:
        return InstallStatus.ready if self.in_image() else InstallStatus.failed
