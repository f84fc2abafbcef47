"""Configuration classes, read from the environment once when the app is built."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTANCE = ROOT / "instance"


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _int(name: str, default: int) -> int:
    try:
        return int(_env(name, str(default)) or default)
    except ValueError:
        return default


def _float(name: str, default: float) -> float:
    try:
        return float(_env(name, str(default)) or default)
    except ValueError:
        return default


def _flag(name: str, default: bool = False) -> bool:
    return (_env(name, "true" if default else "false") or "").lower() in ("1", "true", "yes", "on")


def _host_memory_mb() -> int:
    """MemTotal of this host in MiB (0 where /proc/meminfo cannot be read: no budget)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return 0


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
    # Deepest nesting a JSON body may have; the deepest schema (sandbox configs) needs ~6.
    JSON_MAX_DEPTH = _int("JSON_MAX_DEPTH", 32)
    # Sent on every response (app._register_hooks). No 'unsafe-inline' or 'unsafe-eval':
    # templates carry no inline script, style or handler (tests/security/test_headers.py).
    CONTENT_SECURITY_POLICY = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )
    SESSION_COOKIE_HTTPONLY = True
    SESSION_COOKIE_SAMESITE = "Lax"
    REMEMBER_COOKIE_HTTPONLY = True
    REMEMBER_COOKIE_SAMESITE = "Lax"
    WTF_CSRF_TIME_LIMIT = None
    WTF_CSRF_HEADERS = ["X-CSRFToken"]
    JWT_TTL_SECONDS = int(_env("JWT_TTL_SECONDS", "3600") or 3600)
    # A browser sign-in ends at sign-out, or this many days after it began.
    LOGIN_SESSION_MAX_AGE_DAYS = _int("LOGIN_SESSION_MAX_AGE_DAYS", 30)
    # The egress log (Docker's egress gateway): rows older than this are swept.
    EGRESS_LOG_RETENTION_DAYS = _int("EGRESS_LOG_RETENTION_DAYS", 7)
    # How long an invitation link stays usable.
    INVITATION_TTL_HOURS = _int("INVITATION_TTL_HOURS", 7 * 24)
    # Password sign-in limits (web form and POST /api/v1/auth/login together); only failed
    # attempts count. Syntax: "N per M minutes" (https://limits.readthedocs.io).
    LOGIN_RATE_LIMIT_PER_IP = _env("LOGIN_RATE_LIMIT_PER_IP", "30 per 10 minutes")
    LOGIN_RATE_LIMIT_PER_ACCOUNT = _env("LOGIN_RATE_LIMIT_PER_ACCOUNT", "10 per 10 minutes")
    # Where the counters live: this setting, else REDIS_URL, else this process's memory.
    RATELIMIT_STORAGE_URI: str | None = _env("RATELIMIT_STORAGE_URI")
    RATELIMIT_KEY_PREFIX = "sandlot"
    RATELIMIT_HEADERS_ENABLED = True  # Retry-After on a 429
    # Reverse proxies in front of Sandlot that append to X-Forwarded-For (0: none, the
    # header is ignored; a client could otherwise forge it to dodge the per-IP limit).
    TRUSTED_PROXY_COUNT = _int("TRUSTED_PROXY_COUNT", 0)
    # The queue `flask worker` serves and the web processes enqueue on (with REDIS_URL):
    # deployments, or blue and green releases, sharing one Redis each name their own.
    JOB_QUEUE = _env("JOB_QUEUE", "sandlot")
    # The time limit, in seconds, of a job kind that states none (services/job_limits.py).
    JOB_DEFAULT_TIMEOUT = _int("JOB_DEFAULT_TIMEOUT", 600)
    JOB_FAILURE_TTL = 7 * 24 * 3600
    JOB_HEARTBEAT_SECONDS = 5
    JOB_REAP_GRACE_SECONDS = 60
    # Jobs one process without Redis runs at once (its worker threads).
    INPROCESS_WORKERS = _int("INPROCESS_WORKERS", 2)
    # Fair share (decisions 12): how many workers one tenant may hold at once; 0 = one less
    # than the workers (in-process: INPROCESS_WORKERS; RQ: the live workers on the queue),
    # at least 1. A tenant's further jobs wait while other tenants' jobs run.
    JOB_TENANT_SHARE = _int("JOB_TENANT_SHARE", 0)
    # How often the embedded worker's reaper fails silent jobs and pauses idle sandboxes;
    # 0 turns it off (tests run the reaper explicitly, never behind another test's back).
    INPROCESS_REAPER_SECONDS = 30
    # Sandbox check (decisions 6): URLs the deep check fetches from inside a sandbox, in
    # order, comma-separated; the first that answers proves egress (the config's own
    # allowed destinations are tried too). The package registries skills install from:
    # a sandbox that cannot reach them cannot install skills.
    SANDBOX_EGRESS_PROBE_URLS = _env("SANDBOX_EGRESS_PROBE_URLS",
                                     "https://pypi.org/simple/,https://registry.npmjs.org/")
    # E2B/Cube template provisioning (reference 3.1.7): the base images the standard and
    # desktop templates are built from, and how long a build may take.
    SANDBOX_TEMPLATE_STANDARD_IMAGE = _env("SANDBOX_TEMPLATE_STANDARD_IMAGE",
                                           "e2bdev/base:latest")
    SANDBOX_TEMPLATE_DESKTOP_IMAGE = _env("SANDBOX_TEMPLATE_DESKTOP_IMAGE",
                                          "e2bdev/desktop:latest")
    SANDBOX_TEMPLATE_POLL_SECONDS = 2.0
    # What tenants' configs may reach is the operator's (decisions 11). The Docker engines
    # a config may name: JSON {"name": {"url": "unix:///abs/path" | "tcp://host:port",
    # "tls_dir": "/abs/dir with ca.pem, cert.pem, key.pem"}} (tcp:// needs tls_dir).
    SANDBOX_DOCKER_ENGINES = _env("SANDBOX_DOCKER_ENGINES",
                                  '{"local": {"url": "unix:///var/run/docker.sock"}}')
    # The Docker engines this process owns (issue 28 item 2): it uses them directly, and
    # every other listed engine through a node of its host (`flask node`, via Redis).
    # Comma-separated names, "*" for every listed engine; empty on a host with no engine.
    SANDBOX_OWN_ENGINES: list[str] = _split_keys(_env("SANDBOX_OWN_ENGINES", "local"))
    # How many calls a node runs at once (each holds a thread while its command runs).
    NODE_MAX_CALLS = _int("NODE_MAX_CALLS", 64)
    # The backends configs may use (endpoints.backends_allowed); Docker is opt-in in
    # production (ProductionConfig), as in the reference: the engine socket is host root.
    SANDBOX_BACKENDS: list[str] = _split_keys(_env("SANDBOX_BACKENDS", "docker,e2b,cube"))
    # The Docker images configs may name: repositories (any tag) and namespaces ending in
    # "/", comma-separated; skill snapshots never (endpoints.image_problem).
    SANDBOX_DOCKER_IMAGES: list[str] = _split_keys(_env("SANDBOX_DOCKER_IMAGES",
                                                        "sandlot/sandbox"))
    # The image a new Docker config starts with (the editor pre-fills it; an admin may
    # pick another of the engine's images with "Load templates").
    SANDBOX_DEFAULT_IMAGE = _env("SANDBOX_DEFAULT_IMAGE", "sandlot/sandbox:base")
    # Whether a config's allow_private_endpoints may take effect at all (loopback and
    # private addresses). Link-local, metadata, unspecified and multicast: never.
    SANDBOX_ALLOW_PRIVATE_ENDPOINTS = _flag("SANDBOX_ALLOW_PRIVATE_ENDPOINTS")
    # Open event streams of one process: SKILL_STREAMS_MAX in all (api/install_streams.py),
    # of which one workspace holds at most STREAMS_PER_WORKSPACE, one member or key
    # STREAMS_PER_MEMBER. A stream (an install's or a run's) ends after
    # SKILL_STREAM_MAX_SECONDS; the client reconnects.
    SKILL_STREAMS_MAX = _int("SKILL_STREAMS_MAX", 224)
    SKILL_STREAM_MAX_SECONDS = _int("SKILL_STREAM_MAX_SECONDS", 3600)
    # Web terminals (services/sessions/terminals.py): each holds a server thread while
    # open, so one process relays at most TERMINALS_MAX, and streams and terminals
    # together stay within SKILL_STREAMS_MAX; counted across processes, a
    # member has at most TERMINALS_PER_MEMBER open, a workspace TERMINALS_PER_WORKSPACE
    # and a session TERMINALS_PER_SESSION (the reference's 5).
    TERMINALS_MAX = _int("TERMINALS_MAX", 24)
    TERMINALS_PER_MEMBER = _int("TERMINALS_PER_MEMBER", 10)
    TERMINALS_PER_WORKSPACE = _int("TERMINALS_PER_WORKSPACE", 24)
    TERMINALS_PER_SESSION = _int("TERMINALS_PER_SESSION", 5)
    # Command runs: threads of one process (RUNS_MAX: 503 past it), and runs at once of a
    # member and of a workspace, counted across processes (429 past them). A run's request
    # waits up to RUN_SYNC_WAIT_SECONDS for the command, then answers 202 and the run goes
    # on; a sandbox check's request likewise waits SANDBOX_CHECK_WAIT_SECONDS.
    RUNS_MAX = _int("RUNS_MAX", 128)
    RUNS_PER_MEMBER = _int("RUNS_PER_MEMBER", 32)
    RUNS_PER_TENANT_MAX = _int("RUNS_PER_TENANT_MAX", 64)
    RUN_SYNC_WAIT_SECONDS = _float("RUN_SYNC_WAIT_SECONDS", 5.0)
    SANDBOX_CHECK_WAIT_SECONDS = _float("SANDBOX_CHECK_WAIT_SECONDS", 5.0)
    # A run that outlives its request is refreshed by its process every
    # RUN_HEARTBEAT_SECONDS; the reaper marks one unrefreshed for RUN_LOST_SECONDS `lost`.
    RUN_HEARTBEAT_SECONDS = _int("RUN_HEARTBEAT_SECONDS", 15)
    RUN_LOST_SECONDS = _int("RUN_LOST_SECONDS", 60)
    # Uploads and downloads of a session's files running at once (each holds a thread and
    # up to 64 MiB of memory), counted across processes.
    FILE_TRANSFERS_PER_MEMBER = _int("FILE_TRANSFERS_PER_MEMBER", 2)
    FILE_TRANSFERS_PER_WORKSPACE = _int("FILE_TRANSFERS_PER_WORKSPACE", 6)
    STREAMS_PER_WORKSPACE = _int("STREAMS_PER_WORKSPACE", 64)
    STREAMS_PER_MEMBER = _int("STREAMS_PER_MEMBER", 16)
    # Quotas (services/quotas.py; `flask quotas set` overrides them for one workspace). A
    # session's sandbox counts while the session holds it, paused or not.
    QUOTA_LIVE_SANDBOXES_PER_MEMBER = _int("QUOTA_LIVE_SANDBOXES_PER_MEMBER", 5)
    QUOTA_LIVE_SANDBOXES_PER_WORKSPACE = _int("QUOTA_LIVE_SANDBOXES_PER_WORKSPACE", 25)
    QUOTA_SANDBOX_CONFIGS_PER_WORKSPACE = _int("QUOTA_SANDBOX_CONFIGS_PER_WORKSPACE", 100)
    QUOTA_CONCURRENT_INSTALLS_PER_WORKSPACE = _int("QUOTA_CONCURRENT_INSTALLS_PER_WORKSPACE", 3)
    QUOTA_SKILL_IMAGE_MB_PER_WORKSPACE = _int("QUOTA_SKILL_IMAGE_MB_PER_WORKSPACE", 20000)
    # Warm pool sandboxes waiting at once, all of a workspace's configs together.
    QUOTA_WARM_SANDBOXES_PER_WORKSPACE = _int("QUOTA_WARM_SANDBOXES_PER_WORKSPACE", 8)
    # What one install may add to a config's image, in MB (the commit is refused past it).
    SKILL_IMAGE_ADD_MAX_MB = _int("SKILL_IMAGE_ADD_MAX_MB", 2000)
    # Docker installs (decisions 14): the maintenance sandbox's own disk, in MiB (its image
    # is read-only; the skill's directory and every scratch path live on it), and whether
    # a bundle's install-root.sh may run as root with the image writable (system packages).
    SKILL_INSTALL_DISK_MB = _int("SKILL_INSTALL_DISK_MB", 4096)
    SKILL_INSTALL_ROOT_STEP = _flag("SKILL_INSTALL_ROOT_STEP")
    # An install's commands together (root step, plan, verification), in seconds; one
    # command gets at most SKILL_INSTALL_COMMAND_TIMEOUT of it (600 at most).
    SKILL_INSTALL_COMMANDS_SEC = _int("SKILL_INSTALL_COMMANDS_SEC", 1800)
    SKILL_INSTALL_COMMAND_TIMEOUT = _int("SKILL_INSTALL_COMMAND_TIMEOUT", 600)
    # The sum of the memory limits of every live Docker session sandbox, in MiB; 0 means
    # three quarters of this host's memory (read at start).
    SANDBOX_MEMORY_BUDGET_MB = _int("SANDBOX_MEMORY_BUDGET_MB", 0) or _host_memory_mb() * 3 // 4
    # Warm pools (issue 29 item 2): the most started sandboxes one Docker config may keep
    # ready for new sessions (its `docker.warm_pool_size`, 0 by default, is bounded by
    # this; 0 here turns pools off). They count against the memory budget above.
    SANDBOX_WARM_POOL_MAX = _int("SANDBOX_WARM_POOL_MAX", 4)
    # Docker sandbox limits (decisions 12): every config inherits the defaults and may
    # lower them, never go above the maximum. Memory and disk in MiB, CPU in cores. The
    # disk limit is a per-sandbox filesystem for /workspace, /tmp and the home directory
    # (the root filesystem is read-only); see app/backends/docker/disk.py.
    SANDBOX_DEFAULT_PIDS_LIMIT = _int("SANDBOX_DEFAULT_PIDS_LIMIT", 256)
    SANDBOX_MAX_PIDS_LIMIT = _int("SANDBOX_MAX_PIDS_LIMIT", 4096)
    SANDBOX_DEFAULT_MEMORY_MB = _int("SANDBOX_DEFAULT_MEMORY_MB", 1024)
    SANDBOX_MAX_MEMORY_MB = _int("SANDBOX_MAX_MEMORY_MB", 8192)
    SANDBOX_DEFAULT_CPU_LIMIT = _float("SANDBOX_DEFAULT_CPU_LIMIT", 1.0)
    SANDBOX_MAX_CPU_LIMIT = _float("SANDBOX_MAX_CPU_LIMIT", 4.0)
    SANDBOX_DEFAULT_DISK_MB = _int("SANDBOX_DEFAULT_DISK_MB", 1024)
    SANDBOX_MAX_DISK_MB = _int("SANDBOX_MAX_DISK_MB", 10240)
    # Development only: where generated keys are kept when none are configured.
    INSTANCE_PATH = str(INSTANCE)
    GENERATE_MISSING_KEYS = False
    # Skill bundles (reference 6.3): the effective limit is MAX_SKILL_BUNDLE_SIZE_MB raised to
    # at least MAX_FILE_SIZE_MB and capped at 512 (services/skills/limits.py, max_bundle_mb).
    MAX_FILE_SIZE_MB = _int("MAX_FILE_SIZE_MB", 50)
    MAX_SKILL_BUNDLE_SIZE_MB = _int("MAX_SKILL_BUNDLE_SIZE_MB", 256)
    # Where validated bundles live: a directory (default), or s3://bucket/prefix?endpoint=...
    SKILL_BUNDLE_DIR = _env("SKILL_BUNDLE_DIR", str(INSTANCE / "bundles"))
    SKILL_BUNDLE_STORE = _env("SKILL_BUNDLE_STORE", "")
    # Production with REDIS_URL runs on several hosts: a directory store is refused at
    # start unless it is a path every host shares (NFS and the like), said here.
    SKILL_BUNDLE_DIR_SHARED = _flag("SKILL_BUNDLE_DIR_SHARED")
    # Skill sources (reference 6.2). Every registry base URL is a setting, so tests and
    # air-gapped installs can point them at their own servers.
    CLAWHUB_URL = _env("CLAWHUB_URL", "https://clawhub.ai")
    SKILLHUB_URL = _env("SKILLHUB_URL", "https://skillhub.cn")
    SKILLHUB_API_URL = _env("SKILLHUB_API_URL", "https://api.skillhub.cn")
    SKILLS_SH_URL = _env("SKILLS_SH_URL", "https://skills.sh")
    GITHUB_URL = _env("GITHUB_URL", "https://github.com")
    GITHUB_CODELOAD_URL = _env("GITHUB_CODELOAD_URL", "https://codeload.github.com")
    GITHUB_API_URL = _env("GITHUB_API_URL", "https://api.github.com")
    GITLAB_URL = _env("GITLAB_URL", "https://gitlab.com")
    SKILL_SOURCES_USER_AGENT = "Sandlot-SkillInstaller (compatible; WeKnora-SkillInstaller)"
    SKILL_SOURCES_TIMEOUT_SECONDS = 300
    # Lifts the SSRF guard for skill sources. Tests only; never on by default.
    SKILL_SOURCES_ALLOW_PRIVATE = _flag("SKILL_SOURCES_ALLOW_PRIVATE")
    # True: resolve only IP literals and localhost, never ask DNS (tests: no lookup leaves).
    SKILL_SOURCES_OFFLINE = False

    @classmethod
    def validate(cls, cfg: dict) -> None:
        """Refuse a configuration that cannot run safely."""
        from app.services.sandboxes.endpoints import EngineSettingError, parse_engines

        try:
            parse_engines(cfg.get("SANDBOX_DOCKER_ENGINES") or "")
        except EngineSettingError as exc:
            raise RuntimeError(f"Sandlot refuses to start: {exc}") from None
        from app.backends.registry import SANDBOX_TYPES

        unknown = sorted(set(cfg.get("SANDBOX_BACKENDS") or []) - set(SANDBOX_TYPES))
        if unknown:
            raise RuntimeError("Sandlot refuses to start: SANDBOX_BACKENDS names unknown "
                               f"backends {', '.join(unknown)} (known: docker, e2b, cube)")


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
    INPROCESS_REAPER_SECONDS = 0
    # Limits no ordinary test reaches; the rate-limit tests build apps with low ones.
    LOGIN_RATE_LIMIT_PER_IP = LOGIN_RATE_LIMIT_PER_ACCOUNT = "10000 per minute"
    RATELIMIT_STORAGE_URI = "memory://"
    # The sandbox's own loopback: a deep check in a test never probes beyond the machine.
    SANDBOX_EGRESS_PROBE_URLS = "http://127.0.0.1:9/"
    SANDBOX_TEMPLATE_POLL_SECONDS = 0.2
    # No test traffic leaves the machine: registries on a closed loopback port, no DNS.
    SKILL_BUNDLE_DIR = str(Path(tempfile.gettempdir()) / f"sandlot-test-bundles-{os.getpid()}")
    SKILL_BUNDLE_STORE = ""
    CLAWHUB_URL = SKILLHUB_URL = SKILLHUB_API_URL = SKILLS_SH_URL = "http://127.0.0.1:9"
    GITHUB_URL = GITHUB_CODELOAD_URL = GITHUB_API_URL = GITLAB_URL = "http://127.0.0.1:9"
    SKILL_SOURCES_ALLOW_PRIVATE = False
    SKILL_SOURCES_OFFLINE = True
    # The operator's defaults; tests that use loopback fakes turn private endpoints on.
    # `missing` is an engine whose socket does not exist (unreachable-engine tests).
    SANDBOX_ALLOW_PRIVATE_ENDPOINTS = False
    SANDBOX_DOCKER_ENGINES = json.dumps({
        "local": {"url": _env("SANDLOT_TEST_DOCKER_HOST", "unix:///var/run/docker.sock")},
        "missing": {"url": "unix:///tmp/sandlot-no-engine.sock"}})
    SANDBOX_OWN_ENGINES = ["*"]  # the node tests set it to none


class ProductionConfig(BaseConfig):
    ENV_NAME = "production"
    SANDBOX_BACKENDS = _split_keys(_env("SANDBOX_BACKENDS", "e2b,cube"))
    SESSION_COOKIE_SECURE = True
    REMEMBER_COOKIE_SECURE = True

    @classmethod
    def validate(cls, cfg: dict) -> None:
        super().validate(cfg)
        missing = [
            name
            for name in ("SECRET_KEY", "SECRETS_KEYS", "SQLALCHEMY_DATABASE_URI")
            if not cfg.get(name)
        ]
        if missing:
            names = ", ".join("DATABASE_URL" if m.startswith("SQLALCHEMY") else m for m in missing)
            raise RuntimeError(f"Sandlot refuses to start in production without: {names}")
        if (cfg.get("REDIS_URL") and not cfg.get("SKILL_BUNDLE_DIR_SHARED")
                and not (cfg.get("SKILL_BUNDLE_STORE") or "").startswith("s3://")):
            raise RuntimeError(
                "Sandlot refuses to start in production with REDIS_URL on a local bundle "
                "directory: other hosts could not read the bundles this one stores. Set "
                "SKILL_BUNDLE_STORE to an object store (s3://bucket/prefix), or set "
                "SKILL_BUNDLE_DIR_SHARED=true if SKILL_BUNDLE_DIR is a path every host shares.")


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
