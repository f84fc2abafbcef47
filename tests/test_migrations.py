"""The migrations build the models' schema on an empty database, leave no autogenerate
diff, and survive a downgrade to base and an upgrade again.

Migrations run in a subprocess: migrations/env.py calls logging.config.fileConfig, which
would disable every logger already created in this test process.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from app.extensions import db

ROOT = Path(__file__).resolve().parent.parent
MIGRATE = """
import sys
from flask_migrate import check, downgrade, upgrade
from app import create_app

app = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": sys.argv[1]})
steps = {"upgrade": upgrade, "downgrade": lambda: downgrade(revision="base"), "check": check}
with app.app_context():
    for step in sys.argv[2:]:
        steps[step]()
"""


@pytest.fixture
def empty_database(tmp_path) -> Iterator[str]:
    """A new, empty database on the same server as the test database (or a new SQLite file)."""
    base = os.environ.get("TEST_DATABASE_URL", "")
    if not base.startswith("postgresql"):
        yield f"sqlite:///{tmp_path / 'migrations.db'}"
        return
    name = f"sandlot_mig_{secrets.token_hex(4)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def migrate(url: str, *steps: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", MIGRATE, url, *steps], cwd=ROOT,
                            capture_output=True, text=True, timeout=180,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, f"{steps} failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    return result


def head_revision() -> str:
    config = Config(str(ROOT / "migrations" / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    return ScriptDirectory.from_config(config).get_current_head()


def schema_diff(url: str) -> tuple[str | None, list]:
    """The database's revision and what autogenerate would still change (as env.py does)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return context.get_current_revision(), compare_metadata(context, db.metadata)
    finally:
        engine.dispose()


def app_tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_builds_the_models_schema_with_nothing_left_to_generate(empty_database):
    assert app_tables(empty_database) == set()
    migrate(empty_database, "upgrade")
    revision, diff = schema_diff(empty_database)
    assert revision == head_revision()
    assert diff == [], "the models differ from the migrated schema; add a migration:\n" + \
        "\n".join(map(repr, diff))
    assert app_tables(empty_database) == {t.name for t in db.metadata.sorted_tables}
    migrate(empty_database, "check")  # what `flask db check` says, with env.py's settings


def test_downgrade_to_base_and_upgrade_again(empty_database):
    migrate(empty_database, "upgrade", "downgrade")
    assert app_tables(empty_database) == set()
    assert schema_diff(empty_database)[0] is None
    migrate(empty_database, "upgrade")
    revision, diff = schema_diff(empty_database)
    assert revision == head_revision() and diff == []
