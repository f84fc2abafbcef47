"""Unbound extension objects; create_app binds them."""

import sqlite3

from flask_htmx import HTMX
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from flask_login import LoginManager
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from flask_wtf import CSRFProtect
from sqlalchemy import MetaData, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


db = SQLAlchemy(model_class=Base)
migrate = Migrate()
login_manager = LoginManager()
csrf = CSRFProtect()
htmx = HTMX()
# One limiter object; each app binds it to the storage its config names (create_app).
limiter = Limiter(key_func=get_remote_address, default_limits=[])


@event.listens_for(Engine, "connect")
def _sqlite_wal(dbapi_connection, _record) -> None:
    """SQLite files run in WAL mode with synchronous=NORMAL: a commit appends to the log
    without an fsync (the default rollback journal paid one per commit, 15 ms of a warm
    exec on a busy disk), and readers no longer block the writer. What NORMAL can lose is
    the last commits before a power cut, never consistency; PostgreSQL is unaffected."""
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")  # a no-op for in-memory databases
        cursor.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError:  # locked by a writer: the mode is kept in the file
        pass
    finally:
        cursor.close()
