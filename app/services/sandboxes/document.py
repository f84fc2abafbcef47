"""The sandbox config document (reference 1.2): validate, identity, resolve; masking and
merging of its secrets live in sandbox_secrets and are re-exported here.

Paths in validation errors are relative to the document (`e2b.api_key`,
`network.allow_out[2]`) so a form can place each message next to its field.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Annotated, Any, Literal

from flask import current_app, has_app_context
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
)
from pydantic import ValidationError as PydanticError

from app.backends import registry
from app.backends.base import CubeRule, HostRule, ResolvedNetworkPolicy, SandboxSpec
from app.config import BaseConfig
from app.errors import ValidationFailed
from app.security import ssrf
from app.security.config_secrets import is_lost
from app.security.redaction import MASK
from app.services.field_labels import labelled
from app.services.sandboxes import endpoints, network_policy, nodes
from app.services.sandboxes.network_policy import DENY_ALL, Problems
from app.services.sandboxes.secrets import (  # re-exported: callers use sandbox_doc.merge etc.
    OPERATOR_OWNED,
    SERVER_OWNED,
    endpoint,
    masked,
    merge,
    upgraded_docker,
)

BACKENDS = registry.SANDBOX_TYPES  # the sandbox types, written once: the registry builds them
ROLLOUTS = ("", "next_turn", "new_session")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
ENV_VALUE_MAX = 32 * 1024
DEFAULT_EXEC_TIMEOUT, DEFAULT_IDLE, DEFAULT_HTTP_TIMEOUT = 60, 900, 30
IDLE_MIN, IDLE_MAX = 60, 24 * 3600
DEFAULT_TTL = {"cube": 1800, "e2b": 300, "docker": 1800}
IDENTITY_FIELDS = ("api_url", "api_key", "sandbox_domain", "proxy_url")


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


Seconds = Field(default=0, ge=0, le=7 * 24 * 3600)
# Env values are secrets baked into the sandbox verbatim: a PEM's final newline or a
# password's trailing space must survive, so they are exempt from the block-wide strip.
Verbatim = Annotated[str, StringConstraints(strip_whitespace=False)]


class CubeBlock(_Block):
    api_url: str = ""
    proxy_url: str = ""
    sandbox_domain: str = ""
    template_id: str = ""
    api_key: str = ""
    http_timeout_sec: StrictInt = Field(default=0, ge=0, le=600)
    cube_sandbox_ttl_seconds: StrictInt = Seconds
    dns_servers: list[str] = Field(default_factory=list, max_length=8)


class E2BBlock(_Block):
    api_key: str = ""
    template_id: str = ""
    api_url: str = ""
    sandbox_domain: str = ""
    proxy_url: str = ""
    http_timeout_sec: StrictInt = Field(default=0, ge=0, le=600)
    e2b_sandbox_ttl_seconds: StrictInt = Seconds


class DockerBlock(_Block):
    image: str = ""
    engine: str = Field(default="", max_length=40)
    cpu_limit: StrictFloat | StrictInt | None = Field(default=None, gt=0, le=64)
    memory_limit_mb: StrictInt | None = Field(default=None, ge=16, le=1024 * 1024)
    pids_limit: StrictInt | None = Field(default=None, ge=8, le=1 << 22)
    disk_limit_mb: StrictInt | None = Field(default=None, ge=16, le=1024 * 1024)
    network_mode: Literal["bridge", "none"] = "bridge"
    runtime: str = ""
    idle_ttl_seconds: StrictInt = Seconds
    http_timeout_sec: StrictInt = Field(default=0, ge=0, le=600)
    # Started sandboxes kept ready for new sessions (issue 29 item 2; not in the
    # reference): at most the operator's SANDBOX_WARM_POOL_MAX.
    warm_pool_size: StrictInt = Field(default=0, ge=0)

    @field_validator("network_mode", mode="before")
    @classmethod
    def _empty_mode_is_default(cls, value: Any) -> Any:
        # The reference reads "" as the default (bridge); only exactly "" (not spaces).
        return "bridge" if value == "" else value


class Document(_Block):
    sandbox_type: Literal["docker", "e2b", "cube"]
    default_timeout_sec: StrictInt = Field(default=0, ge=0, le=600)  # TIMEOUT_MAX (decisions 12)
    terminal_idle_disconnect_sec: StrictInt = Field(default=0, ge=0)
    desktop_enabled: StrictBool = False
    allow_private_endpoints: StrictBool = False
    env_vars: dict[str, Verbatim] = Field(default_factory=dict, max_length=200)
    skill_rollout: str = ""
    network: dict[str, Any] | None = None
    cube: CubeBlock | None = None
    e2b: E2BBlock | None = None
    docker: DockerBlock | None = None
    # Server-owned: accepted on input so a client can echo a response back; never kept.
    skill_image: dict[str, Any] | None = None
    volume_mount: dict[str, Any] | None = None


BLOCKS = {"cube": CubeBlock, "e2b": E2BBlock, "docker": DockerBlock}
REQUIRED = {
    "cube": ("api_url", "proxy_url", "sandbox_domain", "template_id"),
    "e2b": ("api_key", "template_id"),
    "docker": ("image",),
}


TEMPLATE_FIELDS = ("template_id", "image")


def validate(raw: Any, *, resolve_urls: bool = True,
             require_template: bool = True) -> dict[str, Any]:
    """The normalised document to store, or ValidationFailed listing every problem.

    `require_template=False` serves the template catalog query, which is how an admin
    finds a template before there is one to require.
    """
    if not isinstance(raw, dict):
        raise ValidationFailed.one("config", "The config must be an object.")
    _refuse_operator_owned(raw)
    try:
        doc = Document.model_validate(raw)
    except PydanticError as exc:
        # The network block is typed loosely, so its own problems are still listed next
        # to the shape errors: a form shows every problem at once.
        problems = Problems(list(ValidationFailed.from_pydantic(exc).errors))
        kind = raw.get("sandbox_type")
        if kind in BACKENDS and isinstance(raw.get("network"), dict):
            network_policy.validate(raw["network"], kind, problems)
        raise ValidationFailed(labelled(problems.items)) from None
    problems = Problems()
    kind = doc.sandbox_type
    block = getattr(doc, kind) or BLOCKS[kind]()
    if refused := endpoints.backend_problem(kind):
        problems.add("sandbox_type", refused)
    _check_common(doc, problems)
    _check_block(kind, block, doc.allow_private_endpoints and endpoints.private_allowed(),
                 problems, resolve_urls, require_template)
    network = network_policy.validate(doc.network, kind, problems)
    if kind == "docker" and not problems:
        _check_remote_engine(block, network or {}, problems)
    if problems:
        raise ValidationFailed(labelled(problems.items))
    out = doc.model_dump(exclude={"cube", "e2b", "docker", "network", *SERVER_OWNED})
    out[kind] = block.model_dump()
    out["network"] = network
    if kind == "cube":
        out["cube"]["dns_servers"] = _unique_stripped(block.dns_servers)
    if kind == "docker":
        out["docker"]["engine"] = block.engine or endpoints.LOCAL
    return out


def _refuse_operator_owned(raw: dict[str, Any]) -> None:
    block = raw.get("docker")
    if isinstance(block, dict):
        found = [name for name in OPERATOR_OWNED if name in block]
        if found:
            raise ValidationFailed(labelled([{"field": f"docker.{name}", "message":
                                              f"not accepted: {OPERATOR_OWNED[name]}"}
                                             for name in found]))


def _check_common(doc: Document, problems: Problems) -> None:
    idle = doc.terminal_idle_disconnect_sec
    if idle and not IDLE_MIN <= idle <= IDLE_MAX:
        problems.add("terminal_idle_disconnect_sec",
                     f"must be between {IDLE_MIN} and {IDLE_MAX} seconds (0 means {DEFAULT_IDLE})")
    if doc.desktop_enabled and doc.sandbox_type == "docker":  # every create would fail
        problems.add("desktop_enabled", "is not available: Docker has no desktop template "
                     "(E2B and Cube have one)")
    if doc.skill_rollout not in ROLLOUTS:
        problems.add("skill_rollout", "must be Next turn or New session (or left at Default)")
    for name, value in doc.env_vars.items():
        if not ENV_NAME.match(name):
            problems.add(f"env_vars.{name}", "must be a valid environment variable name "
                         "(letters, digits, '_'; not starting with a digit)")
        elif name.upper().startswith("SANDLOT_"):
            problems.add(f"env_vars.{name}", "names starting with SANDLOT_ are reserved")
        if "\0" in value or len(value) > ENV_VALUE_MAX:
            problems.add(f"env_vars.{name}", f"value must have no NUL and at most "
                         f"{ENV_VALUE_MAX} characters")


def _check_block(kind: str, block: _Block, allow_private: bool, problems: Problems,
                 resolve_urls: bool, require_template: bool = True) -> None:
    for name in REQUIRED[kind]:
        if name in TEMPLATE_FIELDS and not require_template:
            continue
        value = getattr(block, name)
        if not value or value == MASK:
            problems.add(f"{kind}.{name}", "is required")
    for name in ("api_url", "proxy_url"):
        url = getattr(block, name, "")
        if url and resolve_urls:
            try:
                ssrf.check_url(url, allow_private=allow_private)
            except ssrf.UnsafeURL as exc:
                problems.add(f"{kind}.{name}", f"unsafe outbound URL: {exc}"
                             if allow_private or not exc.private else _PRIVATE_REFUSED)
    if kind == "cube":
        for index, server in enumerate(block.dns_servers):
            try:
                ipaddress.ip_address(server.strip())
            except ValueError:
                problems.add(f"cube.dns_servers[{index}]", f"{server!r} is not an IP address")
    if kind == "docker":
        _check_docker(block, problems, require_template)


_PRIVATE_REFUSED = ("unsafe outbound URL: private, loopback and internal addresses are not "
                    "reachable from this deployment unless the operator allows them")


def _check_docker(block: DockerBlock, problems: Problems, names_image: bool) -> None:
    # The catalog query (names_image False) boots nothing and lists only offered images.
    if names_image and block.image and (refused := endpoints.image_problem(block.image)):
        problems.add("docker.image", refused)
    offered = endpoints.engines()
    if (block.engine or endpoints.LOCAL) not in offered:
        problems.add("docker.engine", "not an engine this deployment offers; use one of: "
                     + ", ".join(sorted(offered)))
    pool_max = int((current_app.config if has_app_context() else vars(BaseConfig))
                   ["SANDBOX_WARM_POOL_MAX"])
    if block.warm_pool_size > pool_max:
        problems.add("docker.warm_pool_size", (
            f"a warm pool may keep at most {pool_max} sandboxes on this deployment"
            if pool_max else "warm pools are turned off on this deployment; leave it at 0"))
    for name, (label, unit, _default, maximum) in _limits().items():
        value = getattr(block, name)
        if value is not None and value > maximum:
            problems.add(f"docker.{name}", f"{label} must be at most {maximum:g}{unit}, "
                         "this deployment's maximum")


def _check_remote_engine(block: DockerBlock, network: dict[str, Any],
                         problems: Problems) -> None:
    """The engine must be usable from here: owned by this process or served by a live
    node of its host (issue 28 item 2). Where its node cannot enforce a network policy
    (an engine reached over tcp: no rules, no resolver, no always-on denies), only
    sandboxes without network may run there, never on Docker's default bridge. Refused
    at save, as at create and exec."""
    engine = endpoints.engines().get(block.engine or endpoints.LOCAL)
    if engine is None:
        return
    if refused := nodes.problem(engine.name):
        problems.add("docker.engine", refused)
        return
    if nodes.enforces_egress(engine):
        return
    policy = resolve_policy({"sandbox_type": "docker", "network": network,
                             "docker": {"network_mode": block.network_mode}})
    if policy.allow_internet_access or policy.allow_out:
        problems.add("docker.engine", f"\u201c{engine.name}\u201d is on another host, where "
                     "this deployment cannot enforce a network policy, so its sandboxes "
                     "run without network: turn on Deny egress by default with no Allowed "
                     "destinations (or set Network to none), or choose an engine on this "
                     "host")


# field: (label, unit, default, maximum); the settings are in app/config.py.
# The labels are the editor's (templates/sandboxes/_editor_backend.html).
LIMIT_SETTINGS = {"pids_limit": ("Processes", "", "PIDS_LIMIT"),
                  "memory_limit_mb": ("Memory (MB)", " MB", "MEMORY_MB"),
                  "cpu_limit": ("CPUs", "", "CPU_LIMIT"),
                  "disk_limit_mb": ("Disk (MB)", " MB", "DISK_MB")}


def _limits() -> dict[str, tuple[str, str, float, float]]:
    """The deployment's default and maximum of each Docker limit (decisions 12)."""
    config = current_app.config if has_app_context() else vars(BaseConfig)
    return {name: (label, unit, config[f"SANDBOX_DEFAULT_{key}"], config[f"SANDBOX_MAX_{key}"])
            for name, (label, unit, key) in LIMIT_SETTINGS.items()}


def effective_limits(block: dict[str, Any]) -> dict[str, Any]:
    """A Docker config's limits: its own where set, else the deployment default, and
    never above the deployment maximum (a stored config may predate a lower one)."""
    out = {}
    for name, (_label, _unit, default, maximum) in _limits().items():
        value = block.get(name) or default
        out[name] = min(value, maximum) if value else None
    return out


def memory_mb(doc: dict[str, Any]) -> int:
    """The memory limit a sandbox of this config holds (Docker; 0 for E2B and Cube, whose
    memory is the provider's)."""
    if doc.get("sandbox_type") != "docker":
        return 0
    return int(effective_limits(doc.get("docker") or {}).get("memory_limit_mb") or 0)


def _unique_stripped(values: list[str]) -> list[str]:
    seen: list[str] = []
    for value in values:
        if value.strip() and value.strip() not in seen:
            seen.append(value.strip())
    return seen


# -- identity and resolution -------------------------------------------------------------

def identity(doc: dict[str, Any]) -> tuple:
    """The fields that decide which account or engine sandboxes live in (reference 1.2)."""
    kind = doc["sandbox_type"]
    block = doc.get(kind) or {}
    engine = endpoints.engine_of(block) if kind == "docker" else ""
    return (kind, bool(doc.get("allow_private_endpoints")), engine,
            *(block.get(name, "") for name in IDENTITY_FIELDS))


def template_of(doc: dict[str, Any]) -> str:
    kind = doc["sandbox_type"]
    block = doc.get(kind) or {}
    return block.get("image", "") if kind == "docker" else block.get("template_id", "")


def resolve_policy(doc: dict[str, Any]) -> ResolvedNetworkPolicy:
    """The stored policy as a provider-neutral struct, fixed at creation (reference 4.3)."""
    network = doc.get("network") or {}
    deny_out = network_policy.canonical_deny_out(list(network.get("deny_out") or []))
    deny_default = network_policy.denies_by_default(network)
    if network.get("deny_egress_by_default") and DENY_ALL not in deny_out:
        deny_out.append(DENY_ALL)
    no_network = doc["sandbox_type"] == "docker" and (doc.get("docker") or {}).get(
        "network_mode") == "none"
    return ResolvedNetworkPolicy(
        allow_internet_access=not deny_default and not no_network,
        allow_out=tuple(e.strip() for e in network.get("allow_out") or []),
        deny_out=tuple(deny_out),
        cube_rules=tuple(_cube_rule(r) for r in network.get("cube_rules") or []),
        host_rules=tuple(
            HostRule(r["host"].strip(), dict(r.get("headers") or {}))
            for r in network.get("e2b_host_rules") or []
        ),
    )


def policy_summary(policy: ResolvedNetworkPolicy) -> dict[str, Any]:
    """What the sandbox enforces (set at creation, or applied to it since), minus any
    secret (header values, inject secrets)."""
    return {"allow_internet_access": policy.allow_internet_access,
            "allow_out": list(policy.allow_out), "deny_out": list(policy.deny_out),
            "cube_rules": len(policy.cube_rules), "e2b_host_rules": len(policy.host_rules)}


def ttl_of(doc: dict[str, Any]) -> int:
    """The idle lifetime a sandbox of this config gets (the backend's TTL setting)."""
    kind = doc["sandbox_type"]
    block = doc.get(kind) or {}
    return int(block.get("e2b_sandbox_ttl_seconds") or block.get("cube_sandbox_ttl_seconds")
               or block.get("idle_ttl_seconds") or DEFAULT_TTL[kind])


def spec_for(doc: dict[str, Any], metadata: dict[str, str],
             timeout_sec: int | None = None, name: str = "") -> SandboxSpec:
    """What to create for a sandbox of this config: its template, env and network policy
    resolved now (reference 4.4), with `metadata`; sessions, installs and checks share it."""
    kind = doc["sandbox_type"]
    block = doc.get(kind) or {}
    limits = effective_limits(block) if kind == "docker" else {}
    return SandboxSpec(
        **limits,
        template=template_of(doc), metadata=dict(metadata),
        env=readable_env(doc), timeout_sec=timeout_sec or ttl_of(doc),
        network=dataclasses.replace(resolve_policy(doc), name=name),
        desktop=bool(doc.get("desktop_enabled")),
        network_mode=block.get("network_mode", "bridge") if kind == "docker" else "bridge",
    )


def readable_env(doc: dict[str, Any]) -> dict[str, str]:
    """The config's env_vars, without values that no longer decrypt: those are unset until
    re-entered (reference 1.3), not baked in as empty strings."""
    return {k: v for k, v in (doc.get("env_vars") or {}).items() if not is_lost(v)}


def _norm(value: Any) -> str:
    return str(value or "").strip().lower()


def _cube_rule(rule: dict[str, Any]) -> CubeRule:
    return CubeRule(
        name=rule["name"].strip(), allow=not rule.get("deny"), scheme=_norm(rule.get("scheme")),
        sni=str(rule.get("sni") or "").strip(), host=str(rule.get("host") or "").strip(),
        methods=tuple(str(m).strip().upper() for m in rule.get("methods") or []),
        path=str(rule.get("path") or ""), audit=_norm(rule.get("audit")),
        inject=tuple(dict(item) for item in rule.get("inject") or []),
    )


__all__ = ["OPERATOR_OWNED", "SERVER_OWNED", "endpoint", "identity", "masked", "merge",
           "resolve_policy", "spec_for", "template_of", "ttl_of", "upgraded_docker", "validate"]
