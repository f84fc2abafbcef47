"""Revision b7e2d0c41a95 (issue 14 item 5): sandbox config documents stored as one token
are rewritten with each secret sealed on its own; a row no key opens is left as it was;
the downgrade puts readable rows back as one token."""

from __future__ import annotations

import json

from sqlalchemy import create_engine, text

from tests.test_migrations import empty_database, migrate  # noqa: F401 (fixture)

BEFORE = "e4f70f066a01"
SEED = """
import json, sys
from cryptography.fernet import Fernet
from flask_migrate import upgrade
from sqlalchemy import text
from app import create_app
from app.extensions import db
from app.security.crypto import crypto

app = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": sys.argv[1]})
doc = {"sandbox_type": "docker", "docker": {"image": "img"}, "env_vars": {"TOKEN": "v-123"}}
with app.app_context():
    upgrade(revision=sys.argv[2])
    old = crypto().encrypt(json.dumps(doc, sort_keys=True))
    lost = Fernet(Fernet.generate_key()).encrypt(json.dumps(doc).encode()).decode()
    with db.engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (id, name, scripts_disabled, created_at) "
                          "VALUES (1, 't', false, CURRENT_TIMESTAMP)"))
        for row_id, token in (("readable", old), ("lost", lost)):
            conn.execute(text("INSERT INTO sandbox_configs (id, tenant_id, name, description, "
                              "sandbox_type, config, created_at, updated_at) VALUES (:id, 1, "
                              ":id, '', 'docker', :c, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"),
                         {"id": row_id, "c": token})
    print(lost)
"""
DOWN = """
import sys
from flask_migrate import downgrade
from app import create_app

app = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": sys.argv[1]})
with app.app_context():
    downgrade(revision=sys.argv[2])
"""


def stored(url: str) -> dict[str, str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.execute(text("SELECT id, config FROM sandbox_configs")).all())
    finally:
        engine.dispose()


def run(script: str, *args: str) -> str:
    import os
    import subprocess
    import sys

    from tests.test_migrations import ROOT

    result = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, text=True,
                            capture_output=True, timeout=180,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip()


def test_whole_document_tokens_are_resealed_secret_by_secret_and_back(empty_database):  # noqa: F811
    lost = run(SEED, empty_database, BEFORE)
    legacy = stored(empty_database)["readable"]
    assert not legacy.startswith("{")

    migrate(empty_database, "upgrade")
    rows = stored(empty_database)
    doc = json.loads(rows["readable"])
    assert doc["docker"] == {"image": "img"} and doc["env_vars"]["TOKEN"].startswith("gAAAAA")
    assert "v-123" not in rows["readable"]
    assert rows["lost"] == lost  # no key opens it: left exactly as it was

    run(DOWN, empty_database, BEFORE)
    rows = stored(empty_database)
    assert not rows["readable"].startswith("{") and rows["lost"] == lost
