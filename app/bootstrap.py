"""Embedded-mode preparation run by wsgi.py (so by gunicorn and every `flask` command), not
by create_app: instance/ kept private, and development keys kept there."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from flask import Flask
from sqlalchemy.engine import make_url

from app.security.crypto import generate_key
from app.security.files import private_dir, tighten_tree, touch_private, write_private


def prepare_instance(app: Flask) -> None:
    """Keep instance/ and a SQLite database private (dirs 0700, files 0600), tightening
    what an earlier run left readable; in development, load or generate SECRET_KEY and
    SECRETS_KEYS under instance/."""
    folder = Path(app.config["INSTANCE_PATH"])
    if folder.exists() or app.config.get("GENERATE_MISSING_KEYS"):
        private_dir(folder)
        loosened = tighten_tree(folder)
        if loosened:
            print(f"NOTICE: made {len(loosened)} file(s) under {folder} private to this user.",
                  file=sys.stderr)
    _private_sqlite(app.config.get("SQLALCHEMY_DATABASE_URI"))
    if not app.config.get("GENERATE_MISSING_KEYS"):
        return
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = app.secret_key = _read_or_create(
            folder / "secret_key", lambda: secrets.token_urlsafe(48))
    if not app.config.get("SECRETS_KEYS"):
        app.config["SECRETS_KEYS"] = [_read_or_create(folder / "secrets.key", generate_key)]


def _read_or_create(path: Path, make) -> str:
    if path.exists():
        return path.read_text().strip()
    value = make()
    write_private(path, value + "\n")
    print(f"WARNING: generated {path.name} into {path.parent}; set it in the environment "
          "for production and keep a backup: stored secrets cannot be read without it.",
          file=sys.stderr)
    return value


def _private_sqlite(uri: str | None) -> None:
    """Create a SQLite database file 0600 before SQLite does (it would use the umask);
    its journal and WAL files take the database file's mode."""
    if not uri or not uri.startswith("sqlite"):
        return
    database = make_url(uri).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database)
    if path.parent.is_dir():
        touch_private(path)
        for suffix in ("-journal", "-wal", "-shm"):
            sidecar = path.with_name(path.name + suffix)
            if sidecar.exists():
                touch_private(sidecar)
