"""Files Sandlot keeps on disk (instance/: database, keys, bundles, resolver state and log)
are readable by the server's user only: created 0600 in 0700 directories, and tightened at
start when an earlier run left them world-readable."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app import create_app
from app.backends.docker.egress import dns
from app.bootstrap import prepare_instance
from app.extensions import db
from app.storage import blobstore

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def loose_files(root: Path) -> list[str]:
    found = []
    for current, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(current) / name
            if mode(path) & 0o077:
                found.append(f"{path.relative_to(root)} {oct(mode(path))}")
    return found


@pytest.fixture
def loose_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def dev_app(instance: Path):
    return create_app({"ENV": "development", "INSTANCE_PATH": str(instance),
                       "SQLALCHEMY_DATABASE_URI": f"sqlite:///{instance / 'sandlot.db'}",
                       "SECRET_KEY": None, "SECRETS_KEYS": []})


def test_a_new_instance_is_private_from_the_start(tmp_path, loose_umask):
    instance = tmp_path / "instance"
    app = dev_app(instance)
    prepare_instance(app)
    with app.app_context():
        db.create_all()  # SQLite writes the file (and its journal) now
        db.session.execute(db.text("select 1"))
        db.engine.dispose()
    assert mode(instance) == 0o700
    for name in ("secret_key", "secrets.key", "sandlot.db"):
        assert mode(instance / name) == 0o600, name
    assert not loose_files(instance)


def test_start_tightens_what_an_earlier_run_left_readable(tmp_path, loose_umask):
    instance = tmp_path / "instance"
    (instance / "egress" / "sandboxes").mkdir(parents=True)
    (instance / "bundles" / "tenant-1").mkdir(parents=True)
    files = {"secret_key": "k" * 40, "secrets.key": "x", "sandlot.db": "",
             "egress/resolver.log": "q example.com", "egress/sandboxes/a.json": "{}",
             "bundles/tenant-1/b.zip": "zip"}
    for name, body in files.items():
        (instance / name).write_text(body)
        os.chmod(instance / name, 0o644)
    for folder in (instance, instance / "egress", instance / "bundles"):
        os.chmod(folder, 0o755)
    prepare_instance(dev_app(instance))
    assert not loose_files(instance)
    assert mode(instance) == 0o700
    assert (instance / "secret_key").read_text() == "k" * 40  # tightened, not rewritten


def test_the_resolver_writes_its_log_pid_and_lock_privately(tmp_path, loose_umask):
    state = tmp_path / "egress"
    done = subprocess.run([sys.executable, "-m", "app.backends.docker.egress.dns", "--state-dir",
                           str(state), "--idle-exit", "0.2"], cwd=ROOT, timeout=60,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert dns.log_path(state).exists() and dns.lock_path(state).exists()
    assert not loose_files(state)


def test_the_resolver_log_opened_by_the_app_is_private(tmp_path, loose_umask):
    """The app opens the log for the resolver's stdout; an old 0644 log is tightened."""
    from app.security.files import open_private

    log = tmp_path / "resolver.log"
    log.write_text("old\n")
    os.chmod(log, 0o644)
    with open_private(log) as handle:
        handle.write("new\n")
    assert mode(log) == 0o600 and log.read_text() == "old\nnew\n"
    fresh = tmp_path / "fresh.log"
    open_private(fresh).close()
    assert mode(fresh) == 0o600


def test_stored_bundles_are_private(tmp_path, loose_umask):
    import io

    store = blobstore.FileBlobStore(tmp_path / "bundles")
    store.put(io.BytesIO(b"zip bytes"), "tenant-1")
    assert not loose_files(tmp_path / "bundles")
    assert mode(tmp_path / "bundles") == 0o700


def test_make_run_creates_its_files_private():
    recipe = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    commands = [line for line in recipe.splitlines() if line.startswith("\t")]
    assert commands and all("umask 077" in line for line in commands), commands
