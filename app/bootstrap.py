"""Embedded-mode preparation run by wsgi.py, not by create_app: keys kept in instance/."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from flask import Flask

from app.security.crypto import generate_key


def prepare_instance(app: Flask) -> None:
    """In development, load or generate SECRET_KEY and SECRETS_KEYS under instance/."""
    if not app.config.get("GENERATE_MISSING_KEYS"):
        return
    folder = Path(app.config["INSTANCE_PATH"])
    folder.mkdir(parents=True, exist_ok=True)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = app.secret_key = _read_or_create(
            folder / "secret_key", lambda: secrets.token_urlsafe(48))
    if not app.config.get("SECRETS_KEYS"):
        app.config["SECRETS_KEYS"] = [_read_or_create(folder / "secrets.key", generate_key)]


def _read_or_create(path: Path, make) -> str:
    if path.exists():
        return path.read_text().strip()
    value = make()
    path.touch(mode=0o600)
    path.write_text(value + "\n")
    print(f"WARNING: generated {path.name} into {path.parent}; set it in the environment "
          "for production and keep a backup: stored secrets cannot be read without it.",
          file=sys.stderr)
    return value
