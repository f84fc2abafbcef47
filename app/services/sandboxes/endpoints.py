"""What a tenant's config may reach is the operator's decision (decisions 11).

- Docker engines are a deployment setting, `SANDBOX_DOCKER_ENGINES`: a JSON object of
  `{"name": {"url": "unix:///abs/path" | "tcp://host:port", "tls_dir": "/abs/dir"}}`.
  A config names one (`docker.engine`); tenants never send an engine URL or a path.
  Default: `{"local": {"url": "unix:///var/run/docker.sock"}}`.
- `allow_private_endpoints` in a config takes effect only when the operator's
  `SANDBOX_ALLOW_PRIVATE_ENDPOINTS` is on; link-local, metadata, unspecified and
  multicast addresses stay refused whatever either says (security.ssrf).
- The backends a config may use are `SANDBOX_BACKENDS` (comma-separated). Docker is
  opt-in in production, as in the reference: its engine socket is root on the host. A
  backend left out cannot be chosen, and its configs' sandboxes cannot be created or
  run; what already runs can still be listed and ended.
- The Docker images a config may name are `SANDBOX_DOCKER_IMAGES`: repositories
  (`sandlot/sandbox`: any of its tags or digests) and namespaces ending in "/"
  (`registry.example.com/team/`). Skill snapshots (`sandlot/snapshot`) are the app's
  own: no tenant names one, whatever the list says (issue 22).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from flask import current_app, has_app_context

from app.backends import registry
from app.backends.docker.images import SNAPSHOT_REPO
from app.errors import BadRequest

BACKENDS = registry.SANDBOX_TYPES
BACKEND_LABELS = {"docker": "Docker", "e2b": "E2B", "cube": "Cube"}
LOCAL = "local"
DEFAULT_IMAGES = "sandlot/sandbox"  # scripts/sandbox-image.sh builds its tags
DEFAULT_URL = "unix:///var/run/docker.sock"
DEFAULT_ENGINES = json.dumps({LOCAL: {"url": DEFAULT_URL}})
# Read-time mapping of a stored config whose engine URL the operator does not list: not a
# valid name, so it can never match an engine, and saving asks for a listed one.
UNLISTED = "(unlisted)"
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


class EngineSettingError(ValueError):
    """SANDBOX_DOCKER_ENGINES cannot be used (the app refuses to start)."""


@dataclass(frozen=True)
class Engine:
    name: str
    url: str
    tls_dir: str = ""

    @property
    def local(self) -> bool:
        """An engine on this host's socket: the only kind whose egress we can enforce."""
        return self.url.startswith("unix://")


def parse_engines(raw: Any) -> dict[str, Engine]:
    """The operator's engine list from its setting (a JSON string or a mapping)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or DEFAULT_ENGINES)
        except ValueError as exc:
            raise EngineSettingError(f"SANDBOX_DOCKER_ENGINES is not valid JSON: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise EngineSettingError("SANDBOX_DOCKER_ENGINES must be a non-empty JSON object of "
                                 '{"name": {"url": ..., "tls_dir": ...}}')
    return {name: _engine(name, spec) for name, spec in raw.items()}


def _engine(name: Any, spec: Any) -> Engine:
    if not isinstance(name, str) or not NAME.match(name):
        raise EngineSettingError(f"engine name {name!r}: use a-z, 0-9, '-' or '_' (at most 40)")
    if isinstance(spec, str):
        spec = {"url": spec}
    if not isinstance(spec, dict) or set(spec) - {"url", "tls_dir"}:
        raise EngineSettingError(f"engine {name}: give url and optionally tls_dir")
    url, tls_dir = str(spec.get("url") or ""), str(spec.get("tls_dir") or "")
    if url.startswith("unix://"):
        path = url.removeprefix("unix://")
        if not path.startswith("/") or posixpath.normpath(path) != path:
            raise EngineSettingError(f"engine {name}: a unix:// URL needs an absolute, "
                                     "normalised socket path (unix:///run/docker.sock)")
    elif url.startswith("tcp://"):
        try:
            port = urlsplit(url).port
        except ValueError:
            port = None
        if not urlsplit(url).hostname or not port:
            raise EngineSettingError(f"engine {name}: a tcp:// URL needs a host and a port")
        if not tls_dir or not os.path.isabs(tls_dir):
            raise EngineSettingError(f"engine {name}: a tcp:// engine needs tls_dir, an "
                                     "absolute directory with ca.pem, cert.pem and key.pem")
    else:
        raise EngineSettingError(f"engine {name}: url must be unix:///path or tcp://host:port")
    return Engine(name, url, tls_dir)


def engines() -> dict[str, Engine]:
    """The engines this deployment offers (outside an app: the local engine only)."""
    raw = current_app.config.get("SANDBOX_DOCKER_ENGINES") if has_app_context() else None
    return parse_engines(raw or DEFAULT_ENGINES)


def engine_of(block: dict[str, Any]) -> str:
    """The engine name a stored `docker` block uses.

    Configs stored before engines were a setting carry `host` (and `tls_cert_path`): the
    default local socket (or no host) maps to `local`, a URL the operator lists maps to
    that engine, anything else to UNLISTED (unusable until the operator lists it)."""
    if block.get("engine"):
        return str(block["engine"])
    host, tls = str(block.get("host") or ""), str(block.get("tls_cert_path") or "")
    if not host or (host == DEFAULT_URL and not tls):
        return LOCAL
    for engine in engines().values():
        if engine.url == host and engine.tls_dir == tls:
            return engine.name
    return UNLISTED


def engine(name: str) -> Engine | None:
    return engines().get(name or LOCAL)


def owned(config: Any = None) -> set[str]:
    """The engines this process owns (`SANDBOX_OWN_ENGINES`, "*" for all listed): it
    uses them directly; any other goes through a node of its host (nodes.py)."""
    if config is None:
        if not has_app_context():
            return {LOCAL}
        config = current_app.config
    names = set(config.get("SANDBOX_OWN_ENGINES") or ())
    if "*" in names:
        return set(parse_engines(config.get("SANDBOX_DOCKER_ENGINES") or DEFAULT_ENGINES))
    return names


def owns(name: str) -> bool:
    return (name or LOCAL) in owned()


def _listed(setting: str) -> list[str] | None:
    """A list setting (a comma-separated string given as an override, too); None outside
    an app."""
    listed = current_app.config.get(setting) if has_app_context() else None
    if isinstance(listed, str):
        listed = listed.split(",")
    return None if listed is None else [entry.strip() for entry in listed if entry.strip()]


def backends_allowed() -> tuple[str, ...]:
    """The backends this deployment offers, in the product's order (outside an app: all)."""
    listed = _listed("SANDBOX_BACKENDS")
    return BACKENDS if listed is None else tuple(k for k in BACKENDS if k in listed)


def backend_off(kind: str) -> str:
    """Why sandboxes of `kind` cannot be created or run here, or "" when they can."""
    if kind not in BACKENDS or kind in backends_allowed():
        return ""
    return (f"{BACKEND_LABELS[kind]} sandboxes are turned off on this deployment "
            "(the operator's choice); use a config on another backend.")


def backend_problem(kind: str) -> str:
    """The same as a problem of the config's `sandbox_type` field, or ""."""
    if not backend_off(kind):
        return ""
    return (f"is {BACKEND_LABELS[kind]}, which is turned off on this deployment (the "
            "operator's choice); choose another backend")


def require_backend(doc: dict[str, Any]) -> None:
    """Refuse to create or run a sandbox of a backend the operator has turned off."""
    reason = backend_off(str(doc.get("sandbox_type") or ""))
    if reason:
        raise BadRequest(reason, code="sandbox_backend_disabled")


def images_allowed() -> tuple[str, ...]:
    """The repositories and namespaces ("…/") whose images configs may name."""
    listed = _listed("SANDBOX_DOCKER_IMAGES")
    return (DEFAULT_IMAGES,) if listed is None else tuple(listed)


def repository_of(ref: str) -> str:
    """`name[:tag][@digest]` without its tag and digest (a registry port stays)."""
    name = ref.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def image_problem(ref: str) -> str:
    """Why a config may not name the Docker image `ref`, or "" when it may."""
    repository = repository_of(ref.strip())
    if repository == SNAPSHOT_REPO:
        return ("is a skill image this console builds; name the sandbox image instead (its "
                "skills are added by installing them)")
    for entry in images_allowed():
        if repository == entry or (entry.endswith("/") and repository.startswith(entry)):
            return ""
    return ("is not one of the images this deployment offers; choose one of: "
            + ", ".join(images_allowed()))


def private_allowed() -> bool:
    """Whether this deployment lets configs reach private and loopback endpoints."""
    return has_app_context() and bool(current_app.config.get("SANDBOX_ALLOW_PRIVATE_ENDPOINTS"))


def allow_private(doc: dict[str, Any]) -> bool:
    """A config's allow_private_endpoints, as far as the operator lets it count."""
    return bool(doc.get("allow_private_endpoints")) and private_allowed()
