"""Docker-only behaviour: container hardening and limits, networks, foreign containers,
engine errors, and the busybox image."""

from __future__ import annotations

import socket
import threading
import time

import docker
import pytest

from app.backends.base import (
    BackendAuthError,
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    ResolvedNetworkPolicy,
    SandboxNotFound,
    SandboxSpec,
    SandboxState,
)
from app.backends.docker.backend import DockerBackend
from tests.backends.conftest import (
    BUSYBOX_IMAGE,
    FOREIGN_LABEL,
    RUN_ID,
    RUN_LABEL,
    SNAPSHOT_PREFIX,
    Harness,
    docker_settings,
)


@pytest.fixture
def engine(docker_backend: DockerBackend) -> docker.APIClient:
    """The engine seen directly, to check what the backend asked it to do."""
    return docker_backend.api


def host_config(engine: docker.APIClient, sandbox_id: str) -> dict:
    return engine.inspect_container(sandbox_id)["HostConfig"]


# -- hardening and limits ----------------------------------------------------------------

def test_limits_and_hardening_reach_the_container(engine, docker_harness: Harness):
    backend = DockerBackend(docker_settings(cpu_limit=0.5, memory_limit_mb=256, pids_limit=64))
    harness = Harness("docker", backend, docker_harness.template)
    try:
        info = harness.create()
        config = host_config(engine, info.id)
    finally:
        harness.cleanup()
        backend.close()

    assert config["NanoCpus"] == 500_000_000
    assert config["Memory"] == 256 << 20
    assert config["PidsLimit"] == 64
    assert config["CapDrop"] == ["ALL"]
    assert config["SecurityOpt"] == ["no-new-privileges"]
    assert config["Init"] is True
    assert config["AutoRemove"] is False


def test_spec_limits_override_the_config(engine, docker_harness: Harness):
    info = docker_harness.create(cpu_limit=1.5, memory_limit_mb=300, pids_limit=99)

    config = host_config(engine, info.id)

    assert (config["NanoCpus"], config["Memory"], config["PidsLimit"]) == (
        1_500_000_000, 300 << 20, 99)


def test_root_exec_has_no_capabilities_and_no_new_privileges(docker_harness: Harness):
    info = docker_harness.create()

    status = docker_harness.backend.exec(info.id, "cat /proc/self/status", user="root").stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)

    assert fields["CapEff"].strip() == "0000000000000000"
    assert fields["CapBnd"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"


def test_config_and_exec_env_values_are_not_in_errors(docker_harness: Harness):
    secret = "s3cr3t-value-" + RUN_ID
    backend = DockerBackend(docker_settings(runtime="no-such-runtime"))
    try:
        with pytest.raises(BackendError) as caught:
            backend.create(docker_harness.spec(env={"TOKEN": secret}))
    finally:
        backend.close()

    assert secret not in caught.value.reason
    assert secret not in repr(caught.value.__cause__)


# -- networks ----------------------------------------------------------------------------

def test_network_follows_the_policy_and_the_config(engine, docker_harness: Harness):
    deny_all = docker_harness.create(network=ResolvedNetworkPolicy(allow_internet_access=False))
    internet = docker_harness.create()
    allow_some = ResolvedNetworkPolicy(allow_internet_access=False, allow_out=("10.1.2.3/32",))

    assert host_config(engine, deny_all.id)["NetworkMode"] == "none"
    interfaces = docker_harness.backend.exec(deny_all.id, "ls /sys/class/net").stdout.split()
    assert interfaces == ["lo"]
    if docker_harness.backend.egress.unavailable_reason() is None:
        # Enforced here: each networked sandbox has its own network (test_egress.py).
        restricted = docker_harness.create(network=allow_some)
        assert host_config(engine, restricted.id)["NetworkMode"].startswith("sandlot-")
        assert host_config(engine, internet.id)["NetworkMode"].startswith("sandlot-")
    else:  # a policy that restricts is refused rather than run open
        with pytest.raises(BackendError, match="cannot be enforced"):
            docker_harness.create(network=allow_some)
        assert host_config(engine, internet.id)["NetworkMode"] == "bridge"


def test_config_network_mode_none_wins(engine, docker_harness: Harness):
    backend = DockerBackend(docker_settings(network_mode="none"))
    harness = Harness("docker", backend, docker_harness.template)
    try:
        info = harness.create()
        assert host_config(engine, info.id)["NetworkMode"] == "none"
    finally:
        harness.cleanup()
        backend.close()


# -- ownership: containers that are not ours ----------------------------------------------

@pytest.fixture
def foreign(engine) -> str:
    container = engine.create_container(BUSYBOX_IMAGE, command=["sleep", "infinity"],
                                        labels={FOREIGN_LABEL: RUN_ID, "owner": "someone"})
    engine.start(container["Id"])
    yield container["Id"]
    engine.remove_container(container["Id"], force=True)


def test_containers_without_sandlot_labels_are_invisible(engine, docker_backend, foreign):
    assert foreign not in {info.id for info in docker_backend.list({})}
    with pytest.raises(SandboxNotFound):
        docker_backend.get(foreign)
    with pytest.raises(SandboxNotFound):
        docker_backend.exec(foreign, "true")

    docker_backend.delete(foreign)
    assert engine.inspect_container(foreign)["State"]["Running"] is True


# -- exec edge cases ---------------------------------------------------------------------

def test_a_snapshot_child_does_not_inherit_parent_labels_it_does_not_set(docker_harness):
    parent = docker_harness.create(metadata={"sandlot_extra": "parent-only"})
    snapshot = docker_harness.backend.create_snapshot(parent.id, f"{SNAPSHOT_PREFIX}labels")
    try:
        child = docker_harness.create(template=snapshot)

        assert "sandlot_extra" not in docker_harness.backend.get(child.id).metadata
        assert docker_harness.backend.list({"sandlot_extra": "parent-only",
                                            RUN_LABEL: RUN_ID}) == [
            docker_harness.backend.get(parent.id)]
    finally:
        docker_harness.cleanup()
        docker_harness.backend.delete_snapshot(snapshot)


def test_a_background_process_does_not_hold_the_exec_open(docker_harness: Harness):
    info = docker_harness.create()
    started = time.monotonic()

    # setsid escapes timeout's process-group kill and keeps stdout open; the engine
    # still ends the exec shortly after its main process exits.
    result = docker_harness.backend.exec(info.id, "setsid sleep 60 & echo bg", timeout_sec=30)

    assert (result.stdout, result.exit_code, result.timed_out) == ("bg\n", 0, False)
    assert time.monotonic() - started < 10


def test_a_cancel_between_the_handle_and_the_start_still_stops_the_command(
        docker_harness: Harness):
    """The flaky CI run: a cancel that read the exec's handle after `on_started` but
    before the engine started the exec saw "not running", returned False, and the
    command then ran to its timeout."""
    info = docker_harness.create()
    backend = docker_harness.backend
    answer: list[bool] = []
    workers: list[threading.Thread] = []

    def started(ref: str) -> None:
        # the cancel lands while the exec exists but has not started
        workers.append(threading.Thread(
            target=lambda: answer.append(backend.cancel_exec(info.id, ref))))
        workers[0].start()
        time.sleep(0.3)

    began = time.monotonic()
    result = backend.exec(info.id, "sleep 30", timeout_sec=20, on_started=started)
    workers[0].join(10)

    assert time.monotonic() - began < 8, result
    # killed as it started (137), or refused its start while the sweep froze it (126)
    assert answer == [True] and result.exit_code in (126, 137) and not result.timed_out


def test_exec_on_a_paused_sandbox_names_the_problem(docker_harness: Harness):
    info = docker_harness.create()
    docker_harness.backend.pause(info.id)

    with pytest.raises(BackendError, match="paused"):
        docker_harness.backend.exec(info.id, "true")


def test_connect_restarts_a_stopped_container(engine, docker_harness: Harness):
    info = docker_harness.create()
    engine.stop(info.id, timeout=1)
    assert docker_harness.backend.get(info.id).state is SandboxState.terminal

    assert docker_harness.backend.connect(info.id).state is SandboxState.running


def test_busybox_image_runs_the_same_helpers(docker_harness: Harness):
    info = docker_harness.create(template=BUSYBOX_IMAGE)
    backend = docker_harness.backend

    assert backend.exec(info.id, "id -u").stdout == "1000\n"
    backend.write_file(info.id, "dir/x.txt", b"abc")
    assert [(e.name, e.size) for e in backend.list_dir(info.id, "dir")] == [("x.txt", 3)]
    assert backend.exec(info.id, "sleep 30", timeout_sec=1).timed_out


# -- engine errors -----------------------------------------------------------------------

def test_missing_image_is_named(docker_harness: Harness):
    backend = DockerBackend(docker_settings(image="sandlot/no-such-image:x"))
    try:
        with pytest.raises(BackendError, match="sandlot/no-such-image:x"):
            backend.health()
        with pytest.raises(BackendError, match="sandlot/no-such-image:x"):
            backend.create(docker_harness.spec(template=""))
    finally:
        backend.close()


def test_snapshot_names_are_checked_and_only_snapshots_can_be_deleted(docker_backend):
    with pytest.raises(BackendError):
        docker_backend.delete_snapshot("sandlot/sandbox:base")
    with pytest.raises(BackendError):
        docker_backend.create_snapshot("whatever", "-bad")


def test_sandbox_metadata_must_carry_sandlot_labels(docker_backend):
    with pytest.raises(BackendError):
        docker_backend.create(SandboxSpec(template="sandlot/sandbox:base",
                                          metadata={"other": "x"}))


# These need no engine: they check how an unreachable one is reported.

def _closed_unix_socket(tmp_path) -> str:
    path = tmp_path / "closed.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.close()  # the file stays; nobody listens
    return f"unix://{path}"


@pytest.mark.parametrize("host", ["closed-unix", "unix:///nonexistent/docker.sock",
                                  "tcp://127.0.0.1:1"])
def test_an_unreachable_engine_is_reported_quickly(tmp_path, host):
    host = _closed_unix_socket(tmp_path) if host == "closed-unix" else host
    backend = DockerBackend({"image": "x", "host": host, "http_timeout_sec": 5})
    started = time.monotonic()

    with pytest.raises(BackendUnavailable, match="Docker engine not reachable at"):
        backend.health()
    with pytest.raises(BackendUnavailable):
        backend.list({"sandlot_tenant_id": "1"})

    assert time.monotonic() - started < 2


def test_an_engine_that_never_answers_times_out(tmp_path):
    path = tmp_path / "silent.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    backend = DockerBackend({"host": f"unix://{path}", "http_timeout_sec": 1})
    try:
        started = time.monotonic()
        with pytest.raises(BackendTimeout):
            backend.health()
        assert time.monotonic() - started < 3
    finally:
        server.close()


def test_tls_settings_without_certificates_are_an_auth_error(tmp_path):
    backend = DockerBackend({"host": "tcp://127.0.0.1:2376", "tls_cert_path": str(tmp_path)})

    with pytest.raises(BackendAuthError, match="ca.pem"):
        backend.health()


def test_settings_defaults_and_validation():
    settings = DockerBackend({"image": "x", "cpu_limit": 0, "unknown_key": 1}).settings

    assert settings.host == "unix:///var/run/docker.sock"
    assert settings.cpu_limit is None
    assert settings.http_timeout_sec == 30
    with pytest.raises(BackendError, match="network_mode"):
        DockerBackend({"image": "x", "network_mode": "host"})
    with pytest.raises(BackendError, match="invalid docker settings"):
        DockerBackend({"image": "x", "memory_limit_mb": -5})
