"""The backend contract (reference 9.5), run against every provider in `harness`.

Docker runs it on the real engine and image; the E2B/Cube fakes join by adding a
harness in conftest.py. Provider-specific checks live in test_docker_specifics.py.
"""

from __future__ import annotations

import time

import pytest

from app.backends.base import (
    BackendError,
    SandboxNotFound,
    SandboxPathNotFound,
    SandboxState,
)
from tests.backends.conftest import RUN_ID, RUN_LABEL, SNAPSHOT_PREFIX, Harness

EXEC_PATHS = True  # through the exec agent and through docker exec (tests/exec_paths.py)


def run(harness: Harness, sandbox_id: str, command: str, **kwargs):
    return harness.backend.exec(sandbox_id, command, **kwargs)


# -- create, list, get ----------------------------------------------------------------------

def test_create_returns_a_running_sandbox_carrying_its_metadata(harness: Harness):
    info = harness.create(metadata={"sandlot_purpose": "check"})

    assert info.state is SandboxState.running
    assert info.metadata["sandlot_purpose"] == "check"
    assert info.metadata["sandlot_provider"] == harness.name
    assert info.metadata[RUN_LABEL] == RUN_ID
    assert harness.backend.get(info.id).metadata == info.metadata


def test_list_by_metadata_finds_the_sandbox_and_not_one_with_other_labels(harness: Harness):
    mine = harness.create(metadata={"sandlot_session_id": f"mine-{RUN_ID}"})
    other = harness.create(metadata={"sandlot_session_id": f"other-{RUN_ID}"})

    found = harness.backend.list({"sandlot_session_id": f"mine-{RUN_ID}", RUN_LABEL: RUN_ID})

    assert [info.id for info in found] == [mine.id]
    everything = {info.id for info in harness.backend.list({RUN_LABEL: RUN_ID})}
    assert {mine.id, other.id} <= everything


def test_list_includes_paused_sandboxes_by_default_and_filters_by_state(harness: Harness):
    info = harness.create(metadata={"sandlot_session_id": f"paused-{RUN_ID}"})
    harness.backend.pause(info.id)
    query = {"sandlot_session_id": f"paused-{RUN_ID}"}

    assert [i.state for i in harness.backend.list(query)] == [SandboxState.paused]
    assert harness.backend.list(query, frozenset({SandboxState.running})) == []


# -- exec -----------------------------------------------------------------------------------

def test_exec_runs_python_and_returns_stdout_and_exit_code(harness: Harness, shared):
    result = run(harness, shared.id, "python3 -c 'print(1)'")

    assert (result.stdout, result.stderr, result.exit_code) == ("1\n", "", 0)
    assert not result.timed_out and not result.truncated
    assert result.duration_ms >= 0


def test_exec_sees_create_env_and_exec_env(harness: Harness, shared):
    result = run(harness, shared.id, 'echo "$CREATE_VAR $EXEC_VAR"', env={"EXEC_VAR": "per-exec"})

    assert result.stdout == "from-create per-exec\n"


def test_exec_propagates_a_non_zero_exit_code(harness: Harness, shared):
    assert run(harness, shared.id, "exit 7").exit_code == 7


def test_exec_keeps_stderr_apart_from_stdout(harness: Harness, shared):
    result = run(harness, shared.id, "echo out; echo err >&2")

    assert (result.stdout, result.stderr) == ("out\n", "err\n")


def test_exec_uses_cwd(harness: Harness, shared):
    assert run(harness, shared.id, "pwd", cwd="/tmp").stdout == "/tmp\n"


def test_exec_kills_a_command_at_its_timeout_and_says_so(harness: Harness, shared):
    started = time.monotonic()
    result = run(harness, shared.id, "echo started; sleep 30", timeout_sec=2)
    elapsed = time.monotonic() - started

    assert result.timed_out
    assert result.exit_code in (124, 137)
    assert result.stdout == "started\n"
    assert 2 <= elapsed < 6


def test_exec_caps_output_and_flags_truncation(harness: Harness, shared):
    result = run(harness, shared.id, "head -c 100000 /dev/zero | tr '\\0' a", output_limit=1000)

    assert result.stdout == "a" * 1000
    assert result.truncated
    assert result.exit_code == 0


def test_exec_runs_as_the_unprivileged_user_unless_root_is_asked_for(harness: Harness, shared):
    assert run(harness, shared.id, "id -u").stdout == "1000\n"
    assert run(harness, shared.id, "id -u", user="root").stdout == "0\n"


# -- files ----------------------------------------------------------------------------------

def test_write_then_read_a_file_creating_parents(harness: Harness, shared):
    harness.backend.write_file(shared.id, "notes/deep/a.txt", b"hello\x00bytes")

    assert harness.backend.read_file(shared.id, "/workspace/notes/deep/a.txt") == b"hello\x00bytes"
    owner = run(harness, shared.id, "stat -c %u /workspace/notes/deep/a.txt").stdout
    assert owner == "1000\n"


def test_write_replaces_an_existing_file(harness: Harness, shared):
    harness.backend.write_file(shared.id, "replace.txt", b"first version, longer")
    harness.backend.write_file(shared.id, "replace.txt", b"second")

    assert harness.backend.read_file(shared.id, "replace.txt") == b"second"


def test_list_dir_shows_files_and_directories(harness: Harness, shared):
    harness.backend.make_dir(shared.id, "listing/sub")
    harness.backend.write_file(shared.id, "listing/f.bin", b"12345")
    harness.backend.write_file(shared.id, "listing/.hidden", b"")
    harness.backend.write_file(shared.id, "listing/with space.txt", b"x")

    entries = harness.backend.list_dir(shared.id, "listing")

    assert [(e.name, e.is_dir) for e in entries] == [
        (".hidden", False), ("f.bin", False), ("sub", True), ("with space.txt", False)]
    assert {e.name: e.size for e in entries}["f.bin"] == 5
    assert entries[1].path == "/workspace/listing/f.bin"


def test_make_dir_is_mkdir_p_and_remove_is_rm_rf(harness: Harness, shared):
    harness.backend.make_dir(shared.id, "tree/a/b")
    harness.backend.make_dir(shared.id, "tree/a/b")
    harness.backend.write_file(shared.id, "tree/a/b/leaf", b"x")

    harness.backend.remove(shared.id, "tree")
    harness.backend.remove(shared.id, "tree")

    assert "tree" not in {e.name for e in harness.backend.list_dir(shared.id, ".")}


def test_missing_paths_raise_path_not_found(harness: Harness, shared):
    with pytest.raises(SandboxPathNotFound):
        harness.backend.read_file(shared.id, "no/such/file")
    with pytest.raises(SandboxPathNotFound):
        harness.backend.list_dir(shared.id, "no/such/dir")


def test_reading_a_directory_or_listing_a_file_is_refused(harness: Harness, shared):
    harness.backend.write_file(shared.id, "plain.txt", b"x")

    with pytest.raises(BackendError, match="directory"):
        harness.backend.read_file(shared.id, "/usr", user="root")
    with pytest.raises(BackendError):
        harness.backend.list_dir(shared.id, "plain.txt")


def test_read_follows_symlinks(harness: Harness, shared):
    harness.backend.write_file(shared.id, "target.txt", b"via link")
    run(harness, shared.id, "ln -sf target.txt link.txt && ln -sfn /workspace dirlink")

    assert harness.backend.read_file(shared.id, "link.txt") == b"via link"
    assert harness.backend.read_file(shared.id, "dirlink/target.txt") == b"via link"


def test_file_operations_respect_the_users_rights(harness: Harness, shared):
    with pytest.raises(BackendError):
        harness.backend.write_file(shared.id, "/etc/sandlot-test", b"x")
    with pytest.raises(BackendError):
        harness.backend.read_file(shared.id, "/etc/shadow")

    harness.backend.write_file(shared.id, "/etc/sandlot-test", b"x", user="root")
    assert harness.backend.read_file(shared.id, "/etc/sandlot-test", user="root") == b"x"
    assert run(harness, shared.id, "stat -c %u /etc/sandlot-test").stdout == "0\n"


# -- lifecycle ------------------------------------------------------------------------------

def test_pause_stops_exec_and_connect_resumes_with_state_kept(harness: Harness):
    info = harness.create()
    harness.backend.write_file(info.id, "kept.txt", b"still here")

    harness.backend.pause(info.id)
    harness.backend.pause(info.id)  # already paused: no-op
    assert harness.backend.get(info.id).state is SandboxState.paused
    with pytest.raises(BackendError):
        run(harness, info.id, "true")

    assert harness.backend.connect(info.id).state is SandboxState.running
    assert run(harness, info.id, "cat kept.txt").stdout == "still here"


def test_snapshot_is_usable_as_a_template_and_delete_is_idempotent(harness: Harness):
    info = harness.create()
    harness.backend.write_file(info.id, "/opt/baked.txt", b"baked", user="root")

    snapshot = harness.backend.create_snapshot(info.id, f"{SNAPSHOT_PREFIX}snap")
    assert snapshot in {t.id for t in harness.backend.list_templates()}
    child = harness.create(template=snapshot, metadata={"sandlot_purpose": "install"})
    assert harness.backend.read_file(child.id, "/opt/baked.txt") == b"baked"
    assert harness.backend.get(child.id).metadata["sandlot_session_id"] != (
        info.metadata["sandlot_session_id"])

    harness.backend.delete(child.id)
    harness.backend.delete_snapshot(snapshot)
    harness.backend.delete_snapshot(snapshot)
    assert snapshot not in {t.id for t in harness.backend.list_templates()}


def test_delete_is_idempotent_and_a_deleted_sandbox_is_not_found(harness: Harness):
    info = harness.create()

    harness.backend.delete(info.id)
    harness.backend.delete(info.id)

    with pytest.raises(SandboxNotFound):
        harness.backend.get(info.id)
    with pytest.raises(SandboxNotFound):
        run(harness, info.id, "true")
    with pytest.raises(SandboxNotFound):
        harness.backend.connect(info.id)
    assert harness.backend.list({RUN_LABEL: RUN_ID, "sandlot_session_id":
                                 info.metadata["sandlot_session_id"]}) == []


def test_get_on_an_unknown_id_raises_not_found(harness: Harness):
    with pytest.raises(SandboxNotFound):
        harness.backend.get("0" * 64)

