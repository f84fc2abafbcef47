"""What install and removal runs share: claiming the row, the lock, the maintenance
sandbox, its commands as transcript events, the snapshot switch, and failure handling.

A run owns its row only while the row names it (`install_message_id` = the run id and
the row's `job_id` = its job): every write the run makes is conditional on that, so a
stopped or superseded run never overwrites what came after it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from flask import current_app
from sqlalchemy import update

from app.backends.base import Backend, BackendError
from app.extensions import db
from app.models import (
    InstalledSkill,
    InstallStatus,
    SandboxConfig,
    SkillSnapshot,
    SnapshotState,
    Tenant,
)
from app.models.types import utcnow
from app.services import audit, job_limits, quotas
from app.services.sandboxes import document, endpoints, image, incidents
from app.services.sandboxes.provider import backend_for, labels
from app.services.skills.installs import plan
from app.services.skills.installs.events import EventLog, cap
from app.services.skills.installs.lock import ImageLock
from app.services.skills.installs.output import LiveOutput, printed
from app.services.skills.installs.watch import Watch

log = logging.getLogger("sandlot.skills.install")
COMMAND_TIMEOUT_MAX = 600  # decisions 12
COMMANDS_MARGIN_SEC = 600  # after the commands: image commit and cleanup
OUTPUT_LIMIT = 256 * 1024
DISK_FULL = ("No space left on device", "ENOSPC", "Disk quota exceeded")


# Decisions 11: what tenants read never carries addresses, URLs or server paths.
_INTERNAL = re.compile(r"://|\b\d{1,3}(\.\d{1,3}){3}\b|(^|\s)/[\w.-]+/")
_KIND_MESSAGES = {
    "unavailable": "the provider could not be reached",
    "auth": "the provider refused the config's credentials",
    "timeout": "the provider did not answer in time",
    "quota": "the provider's quota is exhausted",
    "not_found": "the maintenance sandbox disappeared",
}


def provider_message(exc: BackendError) -> str:
    """The provider failure as a tenant may read it; the detail goes to the worker log."""
    if exc.kind in _KIND_MESSAGES or _INTERNAL.search(exc.reason):
        what = _KIND_MESSAGES.get(exc.kind, "the provider reported an error")
        ref = incidents.new_reference()
        log.warning("skill run provider failure ref=%s: %s", ref, exc.reason)
        return (f"The sandbox provider failed: {what} (reference {ref}: the worker log has "
                "the detail).")
    return f"The sandbox provider failed: {incidents.conceal(None, exc.reason)}"


class RunFailed(Exception):
    """A step failed; the message is what the admin reads on the row."""


class Stopped(Exception):
    """The run was stopped or superseded; the row belongs to someone else now."""


class Run:
    """One install or removal run of one installed skill."""

    status: InstallStatus  # the row status this run works under
    first_percent: int
    # Whether the run's commands run contained where the backend can (Docker: read-only
    # image, a bounded disk, the sandbox user; the snapshot carries only the skill's
    # paths). Removals run only our own commands, as root, and commit the container.
    contained = False
    root_step = False  # contained, with install-root.sh allowed to write the image

    def __init__(self, row: InstalledSkill, job_id: str,
                 on_progress: Callable[[int, str], None] | None = None,
                 notes: str | None = None):
        self.row, self.job_id, self.notes = row, job_id, notes
        self.skill_id, self.tenant_id, self.name = row.id, row.tenant_id, row.name
        self.config_id = row.sandbox_config_id
        self.run_id = str(uuid.uuid4())
        config = db.session.get(SandboxConfig, self.config_id)
        doc = config.config if config is not None else {}
        secrets = list((doc.get("env_vars") or {}).values()) + list(
            (row.env_values or {}).values())
        self.events = EventLog(self.tenant_id, self.skill_id, self.run_id, secrets, on_progress)
        self.lock = ImageLock(self.tenant_id, self.config_id, self.run_id)
        self.watch = Watch(current_app._get_current_object(), self.skill_id, job_id,
                           self.run_id, str(self.status), self.lock)
        self.backend: Backend | None = None
        self.sandbox_id: str | None = None
        self.exec_env: dict[str, str] = {}
        self.ledger: SkillSnapshot | None = None
        self.switched = False
        cfg = current_app.config
        self.command_timeout = min(int(cfg.get("SKILL_INSTALL_COMMAND_TIMEOUT", 600)),
                                   COMMAND_TIMEOUT_MAX)
        # The commands together get SKILL_INSTALL_COMMANDS_SEC, and end before the job's
        # limit (job_limits) less COMMANDS_MARGIN_SEC for the image commit and cleanup: a
        # plan of many commands cannot add up past either.
        self.commands_budget = max(1, min(
            int(cfg.get("SKILL_INSTALL_COMMANDS_SEC", 1800)),
            job_limits.LIMITS["install_skill"] - COMMANDS_MARGIN_SEC))
        self.commands_deadline = time.monotonic() + self.commands_budget

    # -- the frame ------------------------------------------------------------------------

    def bind(self) -> None:
        """Write this run's locators onto the row (reference 7.2 step 6)."""
        self.row.install_session_id, self.row.install_message_id = self.job_id, self.run_id
        self.row.installing_since = utcnow()
        db.session.commit()

    def execute(self, steps: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run `steps` under the image lock; every outcome leaves the row and events final."""
        if self.notes:  # the transcript's first entry (stream.reinstall_notes)
            self.events.note(self.notes, stage="accepted")
        self.events.emit("accepted", self.first_percent)
        self.watch.start()
        try:
            if not self.lock.acquire(self.watch.cancelled.is_set, lambda: self.events.note(
                    "waiting for another install or removal on this sandbox config")):
                raise Stopped()
            self.watch.locked = True
            return steps()
        except Exception as exc:
            db.session.rollback()
            if self.watch.cancelled.is_set() or isinstance(exc, Stopped):
                return self.stopped()
            return self.failed(self.explain(exc))
        finally:
            self.watch.stop()
            self.cleanup()
            if self.watch.locked:
                self.lock.release()

    def explain(self, exc: Exception) -> str:
        if isinstance(exc, RunFailed):
            return str(exc)
        if isinstance(exc, BackendError):
            log.warning("skill run %s of %s: provider failed: %s", self.run_id, self.skill_id,
                        exc.reason)
            return provider_message(exc)
        if isinstance(exc, image.IdentityChanged):
            return f"The image was not switched: {exc}."
        log.exception("skill run %s of %s crashed", self.run_id, self.skill_id)
        return f"Unexpected error ({type(exc).__name__}); see the worker log."

    def check(self) -> None:
        if self.watch.cancelled.is_set():
            raise Stopped()

    def stopped(self) -> dict[str, Any]:
        """Stop wrote the row already; here only what the run itself holds is released."""
        self.release_build()
        reason = self.watch.reason or "install stopped"
        self.events.note(f"run ended: {reason}", stage="failed")
        return {"status": "stopped", "error": reason}

    def failed(self, message: str) -> dict[str, Any]:
        self.release_build()
        status = self.failure_status()
        values = {"status": status, "error": message[:4000], "installing_since": None}
        if not self.switched and self.update_row(**values) and \
                self.status == InstallStatus.installing:
            self.record_outcome("installed_skill.install_failed")
        self.events.failed(message, status=str(status))
        return {"status": "failed", "error": message}

    def record_outcome(self, action: str) -> None:
        """The run's end in the activity log: the installer's act, not a member's."""
        config = db.session.get(SandboxConfig, self.config_id)
        audit.record(db.session.get(Tenant, self.tenant_id), audit.SystemActor("installer"),
                     action, "installed_skill", self.skill_id,
                     {"name": self.name, "config": config.name if config else ""})
        db.session.commit()

    def failure_status(self) -> InstallStatus:
        return InstallStatus.failed

    def update_row(self, **values: Any) -> bool:
        """Write the row only while it still names this run."""
        result = db.session.execute(update(InstalledSkill).where(
            InstalledSkill.id == self.skill_id, InstalledSkill.install_message_id == self.run_id,
            InstalledSkill.job_id == self.job_id, InstalledSkill.status == self.status,
            InstalledSkill.deleted_at.is_(None)).values(**values, updated_at=utcnow()))
        db.session.commit()
        return result.rowcount == 1

    # -- the maintenance sandbox ----------------------------------------------------------

    def config(self) -> SandboxConfig:
        """The config as it is now (another run may have moved its image meanwhile)."""
        config = db.session.get(SandboxConfig, self.config_id, populate_existing=True)
        if config is None or config.deleted_at is not None:
            raise RunFailed("The sandbox config was deleted.")
        return config

    def boot(self, config: SandboxConfig, template: str, stage_percent: int) -> None:
        """A maintenance sandbox from the current skill image (or the template), under the
        config's network policy (reference 7.2 step 4)."""
        doc = config.config
        if off := endpoints.backend_off(doc["sandbox_type"]):  # turned off since accepted
            raise RunFailed(off)
        self.backend = backend_for(doc)
        self.contained = self.contained and getattr(self.backend, "carries_installs", False)
        try:
            image.release_expired(config, self.backend)
        except BackendError as exc:  # housekeeping must not fail the install
            log.warning("releasing expired snapshots of %s failed: %s", config.id, exc.reason)
        spec = document.spec_for(doc, labels(
            self.tenant_id, session_id=f"run-{self.run_id}", binding_version=0,
            provider=doc["sandbox_type"], config_id=config.id, purpose="install"),
            name=config.name)
        # The config's env reaches every command, but per exec: baked into the sandbox it
        # would be committed into the snapshot and outlive a later change of the secret.
        self.exec_env = dict(spec.env)
        if self.contained:  # the image read-only (but for a root step), the disk bounded
            spec = dataclasses.replace(spec, template=template, env={},
                                       writable_root=self.root_step,
                                       disk_limit_mb=self.disk_mb)
        else:  # the snapshot commits the root filesystem, where the commands write
            spec = dataclasses.replace(spec, template=template, env={}, writable_root=True,
                                       disk_limit_mb=None)
        self.check()
        info = self.backend.create(spec)
        self.sandbox_id = info.id
        self.watch.sandbox = (doc, info.id)
        self.check()
        self.events.emit("sandbox_ready", stage_percent)

    @property
    def disk_mb(self) -> int:
        return int(current_app.config["SKILL_INSTALL_DISK_MB"])

    @property
    def user(self) -> str:
        """Who runs the skill's own code: the sandbox user where contained, else root."""
        return "sandbox" if self.contained else "root"

    def shell(self, command: str, cwd: str = "/", timeout: int | None = None,
              env: dict[str, str] | None = None, user: str = "root",
              live: LiveOutput | None = None):
        """One command in the maintenance sandbox, as root unless `user` says otherwise
        (the skill's own code runs as `self.user`), within what is left of the budget;
        with `live`, its output is handed over as it is printed."""
        self.check()
        left = int(self.commands_deadline - time.monotonic())
        if left < 1:
            raise RunFailed(self.out_of_time())
        return self.backend.exec(self.sandbox_id, command, user=user, cwd=cwd,
                                 env={**self.exec_env, **(env or {})},
                                 timeout_sec=min(timeout or self.command_timeout, left),
                                 output_limit=OUTPUT_LIMIT,
                                 **({"on_output": live.add} if live is not None else {}))

    def out_of_time(self) -> str:
        return (f"The install's commands used up the {self.commands_budget} s this "
                "deployment gives them together, before they finished.")

    def step(self, command: str, cwd: str, steps: int, user: str | None = None) -> None:
        """One plan command as transcript events; a failure ends the run (reference 7.2)."""
        self.events.command(command, steps)
        with LiveOutput(current_app._get_current_object(), self.events) as live:
            result = self.shell(command, cwd, user=user or self.user, live=live)
        self.check()
        live.finish(result)
        output = printed(result)
        if result.timed_out and self.commands_deadline - time.monotonic() < 1:
            raise RunFailed(self.out_of_time())
        if result.timed_out:
            raise RunFailed(f"`{command}` did not finish within {self.command_timeout} s and "
                            "was stopped.")
        if result.exit_code != 0:
            if any(mark in output for mark in DISK_FULL):
                bound = (f" (this deployment gives an install {self.disk_mb} MB)"
                         if self.contained else "")
                raise RunFailed(f"The sandbox ran out of disk space while running "
                                f"`{command}`{bound}.")
            last = cap(self.events.mask(output.strip().splitlines()[-1]), 300) \
                if output.strip() else ""
            raise RunFailed(f"`{command}` failed with exit code {result.exit_code}"
                            + (f": {last}" if last else "."))

    def cleanup(self) -> None:
        """Delete the maintenance sandbox, whatever happened (reference 7.2 failure rules)."""
        if self.backend is None:
            return
        try:
            if self.sandbox_id:
                self.backend.delete(self.sandbox_id)
        except BackendError as exc:
            log.warning("maintenance sandbox %s not deleted: %s", self.sandbox_id, exc.reason)
        finally:
            self.backend.close()

    # -- the snapshot ---------------------------------------------------------------------

    def snapshot(self, config: SandboxConfig, trigger) -> str:
        """Ledger row, provider snapshot, pointer switch (owner-checked), supersede."""
        doc = config.config
        owner = image.fingerprint(doc)
        if self.contained:
            return self.carried_snapshot(config, trigger, owner)
        self.admit_changes()
        added = self.admit_image_growth(self.measured())
        self.ledger = image.begin(config, self.skill_id, trigger, size_bytes=added)
        self.check()
        snapshot_id = image.build(self.backend, self.sandbox_id, self.ledger)
        return self.adopt(config, snapshot_id, owner, doc)

    def carried_snapshot(self, config: SandboxConfig, trigger, owner: str) -> str:
        """The contained run's snapshot: the image, plus what a root step changed in it
        (listed in the transcript), plus the skill's directory and the manifest."""
        doc = config.config
        grown = 0
        if self.root_step:
            changed = plan.outside_changes(self.backend.changed_paths(self.sandbox_id),
                                           self.name)
            if changed:
                self.events.note("the root step changed the image at: "
                                 + self.listed(changed))
            grown = self.measured() or 0
        cap_bytes = int(current_app.config["SKILL_IMAGE_ADD_MAX_MB"]) * quotas.MB
        packed = self.backend.pack(self.sandbox_id, [plan.skill_dir(self.name), plan.MANIFEST],
                                   cap_bytes)
        try:
            added = self.admit_image_growth(grown + packed.size)
            self.ledger = image.begin(config, self.skill_id, trigger, size_bytes=added)
            self.check()
            snapshot_id = image.build(self.backend, self.sandbox_id, self.ledger, carry=(
                packed, [plan.skill_dir(self.name)], self.root_step))
        finally:
            packed.discard()
        return self.adopt(config, snapshot_id, owner, doc)

    def adopt(self, config: SandboxConfig, snapshot_id: str, owner: str, doc: dict) -> str:
        self.check()
        image.switch(config.id, snapshot_id, owner, document.template_of(doc))
        self.switched = True
        image.supersede(config.id, keep=self.ledger.id)
        return snapshot_id

    def admit_changes(self) -> None:
        """Nothing outside the skill's own directory goes into the image: a run that
        replaced a program every session runs fails here, naming what it changed."""
        listing = getattr(self.backend, "changed_paths", None)
        if listing is None:
            return
        outside = plan.outside_changes(listing(self.sandbox_id), self.name)
        if outside:
            raise RunFailed("The install changed files outside its skill's directory, "
                            f"which an install may not do: {self.listed(outside)}.")

    @staticmethod
    def listed(paths: list[str]) -> str:
        return ", ".join(paths[:10]) + (f" and {len(paths) - 10} more"
                                        if len(paths) > 10 else "")

    def measured(self) -> int | None:
        """What the sandbox wrote to its image's filesystem (None: the provider has no
        such figure)."""
        measure = getattr(self.backend, "added_bytes", None)
        return measure(self.sandbox_id) if measure is not None else None

    def admit_image_growth(self, added: int | None) -> int | None:
        """What the run adds to the image, refused (nothing committed, nothing left on the
        host) past the per-install cap or the workspace's quota of skill image bytes."""
        if added is None:
            return None
        cap_mb = int(current_app.config["SKILL_IMAGE_ADD_MAX_MB"])
        if added > cap_mb * quotas.MB:
            raise RunFailed(f"The install added {added // quotas.MB} MB to the image, past this "
                            f"deployment's limit of {cap_mb} MB for one install: make it "
                            "leave less behind (build files, downloads, caches).")
        try:
            quotas.admit_image_bytes(db.session.get(Tenant, self.tenant_id), added)
        except quotas.OverQuota as exc:
            raise RunFailed(exc.message) from None
        return added

    def release_build(self) -> None:
        """A snapshot built but never switched to is released (found by planned name)."""
        ledger = self.ledger
        if ledger is None or self.switched or self.backend is None:
            return
        db.session.refresh(ledger)
        if ledger.state in (SnapshotState.building, SnapshotState.active):
            image.release(self.backend, ledger)
