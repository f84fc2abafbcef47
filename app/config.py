"""Configuration classes, read from the environment once when the app is built."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = ROOT / "instance"


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _split_keys(raw: str | None) -> list[str]:
    return [k.strip() for k in (raw or "").split(",") if k.strip()]


class BaseConfig:
    """Settings shared by every environment."""

    ENV_NAME = "base"
    SECRET_KEY: str | None = _env("SECRET_KEY")
    SECRETS_KEYS: list[str] = _split_keys(_env("SECRETS_KEYS"))
    SQLALCHEMY_DATABASE_URI: str | None = _env("DATABASE_URL")
    SQLALCHEMY_ENGINE_OPTIONS = {"pool_pre_ping": True}
    REDIS_URL: str | None = _env("REDIS_URL")
    MAX_CONTENT_LENGTH = 1024 * 1024  # JSON and form bodies; uploads get their own limit
    JSON_BODY_LIMIT = 1024 * 1024
    SESSION_COOKIE_HTTPONLY = True
    SESSION_COOKIE_SAMESITE = "Lax"
    REMEMBER_COOKIE_HTTPONLY = True
    REMEMBER_COOKIE_SAMESITE = "Lax"
    WTF_CSRF_TIME_LIMIT = None
    WTF_CSRF_HEADERS = ["X-CSRFToken"]
    JWT_TTL_SECONDS = int(_env("JWT_TTL_SECONDS", "3600") or 3600)
    JOB_DEFAULT_TIMEOUT = 600
    JOB_FAILURE_TTL = 7 * 24 * 3600
    JOB_HEARTBEAT_SECONDS = 5
    JOB_REAP_GRACE_SECONDS = 60
    INPROCESS_WORKERS = 2
    # Sandbox check (decisions 6): URLs the deep check fetches from inside a sandbox, in
    # order, comma-separated; the first that answers proves egress.
    SANDBOX_EGRESS_PROBE_URLS = _env("SANDBOX_EGRESS_PROBE_URLS",
                                     "https://www.baidu.com,https://1.1.1.1")
    # Development only: where generated keys are kept when none are configured.
    INSTANCE_PATH = str(INSTANCE)
    GENERATE_MISSING_KEYS = False

    @classmethod
    def validate(cls, cfg: dict) -> None:
        """Refuse a configuration that cannot run safely."""


class DevelopmentConfig(BaseConfig):
    ENV_NAME = "development"
    SQLALCHEMY_DATABASE_URI = _env("DATABASE_URL", f"sqlite:///{INSTANCE / 'sandlot.db'}")
    GENERATE_MISSING_KEYS = True


class TestingConfig(BaseConfig):
    ENV_NAME = "testing"
    TESTING = True
    SECRET_KEY = "testing-secret-key-not-for-production"
    SECRETS_KEYS = ["hYNzZ3b2Qm0Oe1m0m4A2S8-oVq4c3M8cJ8QK1y9WgXw="]
    SQLALCHEMY_DATABASE_URI = "sqlite://"
    REDIS_URL = None
    JWT_TTL_SECONDS = 900
    PASSWORD_HASH_METHOD = "pbkdf2:sha256:1000"  # fixtures hash many passwords
    # The sandbox's own loopback: a deep check in a test never probes beyond the machine.
    SANDBOX_EGRESS_PROBE_URLS = "http://127.0.0.1:9/"


class ProductionConfig(BaseConfig):
    ENV_NAME = "production"
    SESSION_COOKIE_SECURE = True
    REMEMBER_COOKIE_SECURE = True

    @classmethod
    def validate(cls, cfg: dict) -> None:
        missing = [
            name
            for name in ("SECRET_KEY", "SECRETS_KEYS", "SQLALCHEMY_DATABASE_URI")
            if not cfg.get(name)
        ]
        if missing:
            names = ", ".join("DATABASE_URL" if m.startswith("SQLALCHEMY") else m for m in missing)
            raise RuntimeError(f"Sandlot refuses to start in production without: {names}")


CONFIGS: dict[str, type[BaseConfig]] = {
    "development": DevelopmentConfig,
    "testing": TestingConfig,
    "production": ProductionConfig,
}


def pick_config(name: str | None = None) -> type[BaseConfig]:
    """The config class named by `name` or by SANDLOT_ENV (default: development)."""
    key = name or _env("SANDLOT_ENV", "development") or "development"
    try:
        return CONFIGS[key]
    except KeyError:
        raise RuntimeError(f"unknown SANDLOT_ENV {key!r}; use one of {sorted(CONFIGS)}") from None
