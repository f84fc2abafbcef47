"""Containment on the real engine (issue 11 item 2): deployment-wide default and maximum
limits reach every Docker sandbox, a disk quota holds, and a command that times out
leaves nothing of itself behind.

Every sandbox here is made the way sessions make them: a stored config document
(validated) turned into a spec by `sandbox_doc.spec_for`, so the deployment's defaults
are what is under test, not limits a test passed by hand.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from flask import current_app

from app.backends.base import SandboxInfo
from app.backends.docker import disk as docker_disk
from app.errors import ValidationFailed
from app.services.sandboxes import document as sandbox_doc
from tests import load
from tests.backends.conftest import BASE_IMAGE, Harness
from tests.factories import config_doc

EXEC_PATHS = True  # through the exec agent and through docker exec (tests/exec_paths.py)

# Lists the processes of a sandbox as "pid args", without ps (not in the image).
PROCESSES = ("for p in /proc/[0-9]*; do [ -r $p/cmdline ] && "
             "echo \"${p#/proc/} $(tr '\\0' ' ' < $p/cmdline)\"; done")


def _doc(**docker: object) -> dict:
    return sandbox_doc.validate(config_doc("docker", {
        "image": BASE_IMAGE, "network_mode": "none", **docker}))


def _create(harness: Harness, **docker: object) -> SandboxInfo:
    spec = sandbox_doc.spec_for(_doc(**docker), harness.metadata())
    info = harness.backend.create(spec)
    harness.created.append(info.id)
    return info


def _processes(harness: Harness, info: SandboxInfo) -> list[str]:
    out = harness.backend.exec(info.id, PROCESSES, timeout_sec=10).stdout
    return [line for line in out.splitlines() if line.strip()]


# -- defaults and maxima -----------------------------------------------------------------

def test_a_config_without_limits_gets_the_deployment_defaults(docker_harness: Harness):
    info = _create(docker_harness)

    host = docker_harness.backend.api.inspect_container(info.id)["HostConfig"]

    cfg = current_app.config
    assert host["PidsLimit"] == cfg["SANDBOX_DEFAULT_PIDS_LIMIT"]
    assert host["Memory"] == cfg["SANDBOX_DEFAULT_MEMORY_MB"] << 20
    assert host["NanoCpus"] == int(cfg["SANDBOX_DEFAULT_CPU_LIMIT"] * 1e9)
    assert host["ReadonlyRootfs"] is True


def test_a_config_may_lower_the_defaults(docker_harness: Harness):
    info = _create(docker_harness, pids_limit=40, memory_limit_mb=128, cpu_limit=0.25)

    host = docker_harness.backend.api.inspect_container(info.id)["HostConfig"]

    assert (host["PidsLimit"], host["Memory"], host["NanoCpus"]) == (40, 128 << 20, 250_000_000)


@pytest.mark.parametrize(("field", "label"), [
    ("pids_limit", "Processes"), ("memory_limit_mb", "Memory (MB)"),
    ("cpu_limit", "CPUs"), ("disk_limit_mb", "Disk (MB)")])
def test_a_limit_above_the_deployment_maximum_is_a_field_error(field: str, label: str):
    setting = {"pids_limit": "PIDS_LIMIT", "memory_limit_mb": "MEMORY_MB",
               "cpu_limit": "CPU_LIMIT", "disk_limit_mb": "DISK_MB"}[field]
    maximum = current_app.config[f"SANDBOX_MAX_{setting}"]
    with pytest.raises(ValidationFailed) as caught:
        _doc(**{field: int(maximum) + 1})

    [error] = caught.value.errors
    assert error["field"] == f"docker.{field}"
    assert error["message"].startswith(label)
    assert "docker." not in error["message"] and "_" not in error["message"]
    assert "maximum" in error["message"]


def test_a_stored_limit_above_a_lowered_maximum_is_capped(app):
    doc = _doc(pids_limit=900, memory_limit_mb=4096)
    app.config.update(SANDBOX_MAX_PIDS_LIMIT=300, SANDBOX_MAX_MEMORY_MB=2048)
    try:
        spec = sandbox_doc.spec_for(doc, {"sandlot_x": "1"})
    finally:
        app.config.update(SANDBOX_MAX_PIDS_LIMIT=4096, SANDBOX_MAX_MEMORY_MB=8192)

    assert (spec.pids_limit, spec.memory_limit_mb) == (300, 2048)
    assert spec.disk_limit_mb == app.config["SANDBOX_DEFAULT_DISK_MB"]


# -- attacks -----------------------------------------------------------------------------

@pytest.fixture
def busy_cores() -> Iterator[None]:
    with load.busy_cores():
        yield


# How many bombs each variant sets off in a row (issue 30 asks for 20 on a busy machine:
# SANDLOT_BOMB_TRIES=20); CI runs a few, each about 3 s.
BOMB_TRIES = int(os.environ.get("SANDLOT_BOMB_TRIES", "3"))
BOMB = "bomb() { bomb | bomb & }; bomb"


@pytest.mark.parametrize("escape", ["", "setsid"], ids=["in-group", "setsid"])
def test_after_a_fork_bomb_times_out_the_next_command_runs_at_once(
        docker_harness: Harness, busy_cores: None, escape: str):
    # A quarter of the deployment's maximum: a pid-by-pid sweep could not keep up with a
    # bomb this size on busy cores (3 tries in 8 left the next command waiting 8-13 s).
    info = _create(docker_harness, pids_limit=1024)
    backend = docker_harness.backend
    # Never let a bomb loose without a process limit: it would take the host's pids.
    pids_limit = backend.api.inspect_container(info.id)["HostConfig"]["PidsLimit"]
    assert pids_limit
    load_before = os.getloadavg()[0]
    # Another command running all along, forked before the bombs: it must survive them.
    # (Its end is not awaited: it is seen alive after the bombs, and goes with the sandbox.)
    threading.Thread(target=backend.exec, args=(info.id, "sleep 900; echo survived"),
                     kwargs={"timeout_sec": 600}, daemon=True).start()
    time.sleep(0.5)
    # The command's own shell forks once (the subshell that lights the bomb), then waits
    # in a builtin loop: once the bomb holds every pid it cannot fork, and a shell that
    # tried would end early ("Cannot fork") instead of timing out. The setsid bomb leaves
    # the process group, so only the host can end it.
    bomb = (f"setsid sh -c '{BOMB}' >/dev/null 2>&1 & while :; do :; done" if escape
            else f"({BOMB}); while :; do :; done")

    answers: list[float] = []
    for attempt in range(BOMB_TRIES):
        result = backend.exec(info.id, bomb, timeout_sec=2)
        started = time.monotonic()
        after = backend.exec(info.id, "echo alive", timeout_sec=10)
        answers.append(time.monotonic() - started)

        assert result.timed_out, (attempt, result)
        assert (after.stdout, after.exit_code) == ("alive\n", 0), (attempt, after)
        assert answers[-1] < 3, (attempt, answers)

    print(f"next command answered in {min(answers):.2f}-{max(answers):.2f} s")
    left = _processes(docker_harness, info)
    assert not [line for line in left if "bomb" in line]
    assert [line for line in left if "sleep 900" in line], left  # the other command lives
    assert backend.api.inspect_container(info.id)["State"]["Status"] == "running"
    # Bounded by the process limit: never more runnable processes than it allows (each
    # bomb briefly holds all of them); without limits one bomb took the host's load to 7203.
    assert os.getloadavg()[0] < load_before + pids_limit


def test_a_thread_bomb_stops_at_the_process_limit(docker_harness: Harness):
    info = _create(docker_harness)
    script = ("import threading, time\n"
              "n = 0\n"
              "try:\n"
              "    for _ in range(1500):\n"
              "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
              "        n += 1\n"
              "except RuntimeError:\n"
              "    pass\n"
              "print(n)\n")
    docker_harness.backend.write_file(info.id, "/workspace/threads.py", script.encode())

    result = docker_harness.backend.exec(info.id, "python3 /workspace/threads.py",
                                         timeout_sec=30)

    assert result.exit_code == 0, result
    assert int(result.stdout) < current_app.config["SANDBOX_DEFAULT_PIDS_LIMIT"]


def test_writing_past_the_disk_quota_fails_inside_and_spares_the_host(docker_harness: Harness):
    info = _create(docker_harness, disk_limit_mb=64)
    backend = docker_harness.backend

    results = {place: backend.exec(info.id, f"dd if=/dev/zero of={place}/fill bs=1M "
                                   "count=200 2>&1; sync", timeout_sec=60)
               for place in ("/workspace", "/tmp", "/home/sandbox")}
    rootfs = backend.exec(info.id, "echo x > /opt/fill; echo x > /var/fill", user="root",
                          timeout_sec=10)
    sizes = backend.exec(info.id, "du -sm /workspace/fill /tmp/fill /home/sandbox/fill",
                         timeout_sec=10).stdout
    [row] = backend.api.containers(all=True, size=True, filters={"id": info.id})

    for place, result in results.items():
        assert "No space left on device" in result.stdout, (place, result)
    total = sum(int(line.split()[0]) for line in sizes.splitlines())
    assert total <= 64
    assert "Read-only file system" in rootfs.stderr
    assert row.get("SizeRw", 0) < 1 << 20  # the container's own layer stays empty
    disk_id = docker_disk.disk_of(backend.api.inspect_container(info.id))
    if disk_id:  # a loop disk: the host holds what was written, never past the quota
        image, _ = docker_disk._paths(disk_id)
        assert image.stat().st_blocks * 512 <= (64 + 8) << 20
    # The sandbox is still usable once the files go.
    again = backend.exec(info.id, "rm /workspace/fill && echo ok > /workspace/small && "
                         "cat /workspace/small", timeout_sec=10)
    assert again.stdout == "ok\n"


def test_at_timeout_every_process_the_command_started_is_killed(docker_harness: Harness):
    info = _create(docker_harness)
    command = ("sleep 300 & setsid sleep 301 & (sleep 302 &); "
               "setsid sh -c 'exec env -i sleep 303' & sleep 60")

    result = docker_harness.backend.exec(info.id, command, timeout_sec=2)

    assert result.timed_out
    left = [line for line in _processes(docker_harness, info) if "sleep 30" in line]
    assert left == []


def test_a_sweep_spares_the_init_and_main_process_even_when_they_look_new(
        docker_harness: Harness):
    # On a busy host the main process (forked by the init after the engine answered
    # start) can start in the same clock tick as the exec sent next, or later. A sweep
    # from before the container existed sees every process as "new": it must still
    # spare the init and the main process and kill only the command's leftovers.
    from app.backends.docker import reap as docker_reap

    if not docker_reap.available(docker_harness.backend.settings.host):
        pytest.skip("the host-side sweep needs the local engine and root")
    info = _create(docker_harness)
    docker_harness.backend.exec(info.id, "setsid sleep 304 &", timeout_sec=5)
    init_pid = docker_harness.backend.api.inspect_container(info.id)["State"]["Pid"]

    docker_reap.reap(init_pid, since_ticks=0, protected_roots=set())

    state = docker_harness.backend.api.inspect_container(info.id)["State"]
    assert state["Status"] == "running"
    assert [line for line in _processes(docker_harness, info) if "sleep 30" in line] == []


def test_a_timeout_spares_a_concurrent_command(docker_harness: Harness):

    info = _create(docker_harness)
    other: list = []
    thread = threading.Thread(target=lambda: other.append(docker_harness.backend.exec(
        info.id, "sleep 6; echo survived", timeout_sec=30)))
    thread.start()
    time.sleep(1)

    docker_harness.backend.exec(info.id, "setsid sleep 400 & sleep 60", timeout_sec=2)
    thread.join(30)

    assert other and other[0].stdout == "survived\n"


def test_exit_code_and_stderr_come_back_exactly(docker_harness: Harness):
    info = docker_harness.create()
    backend = docker_harness.backend

    plain = backend.exec(info.id, "printf out; printf err >&2; exit 3")
    flooded = backend.exec(info.id, "head -c 5000 /dev/zero | tr '\\0' e >&2; exit 4",
                           output_limit=1000)

    assert (plain.stdout, plain.stderr, plain.exit_code, plain.truncated) == (
        "out", "err", 3, False)
    assert (flooded.stderr, flooded.exit_code, flooded.truncated) == ("e" * 1000, 4, True)


def test_a_disk_left_by_a_crash_is_released(docker_harness: Harness):
    if not docker_disk.loop_available(docker_harness.backend.settings.host):
        pytest.skip("loop disks need root next to the engine")
    kept = _create(docker_harness, disk_limit_mb=32)
    kept_disk = docker_disk.disk_of(docker_harness.backend.api.inspect_container(kept.id))
    orphan = docker_disk.create(32, docker_harness.backend.settings.host)  # no container
    image, mount_dir = docker_disk._paths(orphan.disk_id)
    assert os.path.ismount(mount_dir)
    # Made before the grace period, as a crash's leftover is. The sweep keeps to the real
    # grace: with none, it would also take another worker's disk whose container is being
    # created at this moment.
    old = time.time() - docker_disk.ORPHAN_GRACE_SEC - 60
    os.utime(image, (old, old))

    removed = docker_disk.sweep_orphans(docker_harness.backend.api)

    assert orphan.disk_id in removed and kept_disk not in removed
    assert not image.exists() and not mount_dir.exists()
    assert docker_harness.backend.exec(kept.id, "echo ok > /workspace/f && cat /workspace/f"
                                       ).stdout == "ok\n"


def test_a_disk_is_released_by_a_process_with_another_disk_directory(
        docker_harness: Harness, tmp_path, monkeypatch: pytest.MonkeyPatch):
    # A web process makes the sandbox; a worker whose SANDBOX_DISK_DIR differs removes it
    # when the session ends: the disk goes from where it was made, not stays mounted.
    if not docker_disk.loop_available(docker_harness.backend.settings.host):
        pytest.skip("loop disks need root next to the engine")
    made_in, other = tmp_path / "web-disks", tmp_path / "worker-disks"
    monkeypatch.setenv("SANDBOX_DISK_DIR", str(made_in))
    info = _create(docker_harness, disk_limit_mb=32)
    disk_id = docker_disk.disk_of(docker_harness.backend.api.inspect_container(info.id))
    image, mount_dir = docker_disk._paths(disk_id)
    assert os.path.ismount(mount_dir)
    monkeypatch.setenv("SANDBOX_DISK_DIR", str(other))

    try:
        docker_harness.backend.delete(info.id)

        assert not os.path.ismount(mount_dir) and not image.exists()
        assert not mount_dir.exists()
    finally:  # a failing run leaves no mount behind
        docker_disk.release(disk_id, str(made_in))


def test_a_timeout_whose_leftovers_the_host_cannot_reach_says_so(
        docker_harness: Harness, monkeypatch: pytest.MonkeyPatch):
    # An engine on another host (or no root here): only the in-container process-group
    # kill applies, and the run's result says what could not be done.
    from app.backends.docker import reap as docker_reap

    info = _create(docker_harness)
    monkeypatch.setattr(docker_reap, "available", lambda host: False)

    result = docker_harness.backend.exec(info.id, "setsid sleep 305 >/dev/null 2>&1 & sleep 60",
                                         timeout_sec=1)

    assert result.timed_out
    assert result.stderr.endswith("sandlot: processes this command may have left outside "
                                  "its process group cannot be ended from here: the Docker "
                                  "engine is not on this host\n")
