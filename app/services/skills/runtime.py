"""Running an installed skill in a session: which skill may run, its runtime names and
working directory (reference 9.3), and capture after a successful run (reference 8.4)."""

from __future__ import annotations

from sqlalchemy import select

from app.backends.base import Backend, ExecResult
from app.errors import NotFound
from app.extensions import db
from app.models import SandboxConfig
from app.models.skill import InstalledSkill, InstallStatus
from app.services.personal import capture as exec_capture
from app.services.personal import resolver
from app.services.personal.values import Who

SKILLS_ROOT = "/opt/weknora/tenant/skills"
OUTPUT_DIR, INPUT_DIR = "/workspace/output", "/workspace/input"
# The sandbox images' PATH (scripts/sandbox-image.sh), after the skill's own .venv/bin.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def usable_skill(config: SandboxConfig, name: str) -> InstalledSkill:
    """Installed skill `name`, if enabled and in the image: ready, or still served from the
    previous build while an upgrade runs or after it failed (reference 1.7)."""
    installed = db.session.scalar(select(InstalledSkill).where(
        InstalledSkill.sandbox_config_id == config.id, InstalledSkill.name == name,
        InstalledSkill.enabled.is_(True), InstalledSkill.deleted_at.is_(None)))
    usable = installed is not None and (installed.status == InstallStatus.ready
                                        or (installed.served and installed.status
                                            != InstallStatus.removing))
    if not usable:
        raise NotFound(f"No ready skill named {name!r} is installed on this sandbox config.")
    return installed


def skill_runtime(installed: InstalledSkill) -> tuple[dict[str, str], str]:
    """The injected runtime names and working directory of a run of `installed`.

    The names stay the reference's (WEKNORA_*) so skills written for it run unchanged;
    they win over every resolved variable (members cannot set them: decisions 9)."""
    skill_dir = f"{SKILLS_ROOT}/{installed.name}"
    env = {"WEKNORA_SKILL_DIR": skill_dir, "WEKNORA_SKILL_OUTPUT_DIR": OUTPUT_DIR,
           "WEKNORA_SKILL_HISTORY_ROOT": OUTPUT_DIR, "WEKNORA_SESSION_INPUT_DIR": INPUT_DIR,
           "NODE_PATH": f"{skill_dir}/node_modules",
           "PATH": f"{skill_dir}/.venv/bin:{skill_dir}/node_modules/.bin:{BASE_PATH}"}
    return env, skill_dir



def capture(backend: Backend, sandbox_id: str, who: Who, installed: InstalledSkill,
             directory: str, result: ExecResult) -> None:
    """After a successful run only: read back what it exported and keep the caller's own
    values where no layer has one (env_resolver.capture never overwrites)."""
    if result.exit_code != 0 or result.timed_out:
        backend.exec(sandbox_id, f"rm -rf {directory}", timeout_sec=10, output_limit=1024)
        return
    read = backend.exec(sandbox_id, exec_capture.read_command(directory), timeout_sec=10,
                        output_limit=256 * 1024)
    resolver.capture(who, installed, exec_capture.parse(read.stdout))
