"""One install run (reference 7.2 with decisions 8), as the `install_skill` job runs it.

accepted 10 -> sandbox_ready 25 -> seeding 28 -> seeded 35 -> agent 35..79 (one event per
command, and its output) -> agent_done 80 -> verify_note 80 -> verified 90 -> manifest,
env declarations, scratch cleanup -> snapshot and pointer switch -> row ready, `served`
cleared -> live sessions marked stale -> done 100.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from typing import Any

from flask import current_app

from app.backends.base import SandboxPathNotFound
from app.extensions import db
from app.models import EventKind, InstalledSkill, InstallStatus, SnapshotTrigger
from app.services.sandboxes import image
from app.services.skills import store
from app.services.skills.installs import plan
from app.services.skills.installs.run import Run, RunFailed, Stopped
from app.storage import blobstore


def install(job_id: str, skill_id: str, on_progress: Callable[[int, str], None] | None = None,
            notes: str | None = None) -> dict[str, Any]:
    """Run the install the row asks for, if this job is still the one it names; a
    reinstall's `notes` open its transcript."""
    row = db.session.get(InstalledSkill, skill_id)
    if row is None or row.deleted_at is not None or row.status != InstallStatus.installing \
            or row.job_id != job_id or row.stop_requested_at is not None:
        return {"status": "skipped", "error": "this run is no longer wanted by the skill"}
    run = InstallRun(row, job_id, on_progress, notes)
    run.bind()
    return run.execute(run.steps)


def read_bundle(ref: str | None) -> plan.Files:
    """The skill's stored archive. Registering the skill again is the way out only when
    the archive is gone or damaged; a store that cannot be reached still has it."""
    try:
        with store.blobs().open(ref or "") as archive:
            return plan.Files.from_zip(archive)
    except blobstore.BlobMissing as exc:
        raise RunFailed("The skill's stored archive is gone; register the skill again "
                        "and reinstall.") from exc
    except (blobstore.BlobStoreError, OSError) as exc:
        raise RunFailed("The skill bundle store could not be read, so the install did "
                        "not start; reinstall once the store answers again (the archive "
                        "is kept).") from exc
    except (zipfile.BadZipFile, ValueError) as exc:
        raise RunFailed("The skill's stored archive is damaged; register the skill again "
                        "and reinstall.") from exc


class InstallRun(Run):
    status = InstallStatus.installing
    first_percent = 10
    contained = True

    def steps(self) -> dict[str, Any]:
        config = self.config()
        files = self.files()
        if plan.ROOT_STEP in files.data:
            if not current_app.config["SKILL_INSTALL_ROOT_STEP"]:
                raise RunFailed(f"This skill has a root step ({plan.ROOT_STEP}) for system "
                                "packages, and this deployment does not allow root steps.")
            self.root_step = True
        self.boot(config, image.boot_template(config.config), 25)
        directory = plan.skill_dir(self.name)
        self.seed(files, directory)
        commands = plan.commands(files)
        if self.root_step:
            self.events.note(f"Running {plan.ROOT_STEP} as root: this deployment allows a "
                             "root step for system packages, and what it changes in the "
                             "image is listed before the snapshot")
            self.step(f"./{plan.ROOT_STEP}", directory, 1, user="root")
        for count, command in enumerate(commands, start=1 + self.root_step):
            self.step(command, directory, count)
        self.events.emit("agent_done", 80)
        self.verify(files, directory)
        self.events.emit("verified", 90)
        envs = self.finish_tree(files, directory)
        snapshot_id = self.snapshot(config, SnapshotTrigger.install)
        self.ready(snapshot_id, envs)
        image.mark_stale(self.config())
        self.events.emit("done", 100, status="ready")
        return {"status": "ready", "snapshot_id": snapshot_id}

    def seed(self, files: plan.Files, directory: str) -> None:
        """The bundle into the skill's directory, as one tar (reference 7.2 step 7); owned
        by the sandbox user where its commands run contained."""
        self.shell(plan.reset_script(directory, keep_dir=not self.contained))
        self.events.emit("seeding", 28, message=f"seeding {len(files.data)} files")
        if self.contained:
            self.backend.extract_tar(self.sandbox_id, plan.SKILLS_ROOT, files.tar(
                top=self.name, owner=self.backend.install_uid))
        else:
            self.backend.extract_tar(self.sandbox_id, directory, files.tar())
        self.events.emit("seeded", 35)

    def files(self) -> plan.Files:
        return read_bundle(self.row.bundle_ref)

    def verify(self, files: plan.Files, directory: str) -> None:
        """Reference 7.2 step 13: declared files present, packages importable, scripts
        parse; every finding is a non-fatal `verify_note`."""
        listing = json.dumps(sorted(files.data))
        result = self.shell(plan.verify_command(), directory,
                           timeout=min(self.command_timeout, 120),
                           env={"SANDLOT_VERIFY_FILES": listing}, user=self.user)
        notes = [line for line in result.stdout.splitlines() if line.strip()]
        if result.exit_code != 0 and not notes:
            notes = ["verification could not run in this sandbox image (python3 missing?)"]
        for note in notes[:50]:
            self.events.emit("verify_note", 80, kind=EventKind.note, message=note)

    def finish_tree(self, files: plan.Files, directory: str) -> list[dict[str, Any]] | None:
        """Manifest entry, env declarations (7.4), scratch cleanup (7.2 steps 14-16)."""
        entry = {"version": self.row.version, "bundle_sha256": self.row.bundle_sha256}
        manifest = self.shell(plan.manifest_command(self.name, entry))
        if manifest.exit_code != 0:
            self.events.note("the manifest could not be updated (python3 missing?)")
        try:
            declared = self.backend.read_file(self.sandbox_id,
                                              f"{directory}/{plan.ENV_DECLARATIONS}", user="root")
        except SandboxPathNotFound:
            declared = None
        envs = plan.declarations(declared, files)
        if envs:
            self.events.note("declared environment variables: "
                             + ", ".join(e["name"] for e in envs))
        elif envs is None and self.row.envs:
            self.events.note("no usable environment variable declaration; the declared "
                             "variables and their values are kept: "
                             + ", ".join(e["name"] for e in self.row.envs))
        if not self.contained:  # contained, the scratch is on a disk the image never gets
            self.shell(plan.CLEANUP)
        return envs

    def ready(self, snapshot_id: str, envs: list[dict[str, Any]] | None) -> None:
        """Reference 7.2 step 18; admin values of names still declared are carried over,
        and without a usable declaration (None) the stored ones stay as they were."""
        if envs is None:
            envs = list(self.row.envs or [])
        names = {e["name"] for e in envs}
        kept = {k: v for k, v in (self.row.env_values or {}).items() if k in names}
        if not self.update_row(status=InstallStatus.ready, installed_snapshot_id=snapshot_id,
                               error=None, served=None, envs=envs, env_values=kept or None,
                               installing_since=None):
            # Stopped or superseded after the switch: the row says so, and the events must
            # not claim `done`. A later removal still finds this build in the ledger.
            raise Stopped()
        self.record_outcome("installed_skill.installed")
