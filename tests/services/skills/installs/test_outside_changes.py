"""What an install may change in the image (issue 22 item 4): its own skill's directory,
the manifest, and the scratch the cleanup empties; never another skill's directory or a
program every session runs."""

from __future__ import annotations

from app.services.skills.installs.plan import outside_changes

SKILLS = "/opt/weknora/tenant/skills"


def test_its_own_directory_the_manifest_scratch_and_their_parents_are_allowed():
    changes = [("/opt", "changed"), ("/opt/weknora", "added"), (SKILLS, "added"),
               (f"{SKILLS}/pdf", "added"), (f"{SKILLS}/pdf/.venv/bin/python", "added"),
               (f"{SKILLS}/.manifest.json", "changed"), ("/tmp", "changed"),
               ("/root", "changed"), ("/root/.cache", "deleted"),
               ("/usr/sbin/docker-init", "added")]
    assert outside_changes(changes, "pdf") == []


def test_another_skills_directory_and_system_files_are_named_once_each():
    changes = [("/usr", "changed"), ("/usr/local/bin", "changed"),
               ("/usr/local/bin/python3", "added"), (f"{SKILLS}/other/run.sh", "changed"),
               ("/root/.profile", "added"), ("/etc/ld.so.preload", "added"),
               (SKILLS, "deleted")]
    assert outside_changes(changes, "pdf") == [
        "/usr/local/bin/python3", f"{SKILLS}/other/run.sh", "/root/.profile",
        "/etc/ld.so.preload", SKILLS]
