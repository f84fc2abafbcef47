"""The secrets of a sandbox config document: masked on the way out, carried over on the
way in (reference 1.3), and bound to the endpoints they were stored with (decisions 11).
"""

from __future__ import annotations

import copy
from typing import Any

from app.errors import ValidationFailed
from app.security.config_secrets import LostMapping, LostSecret
from app.security.redaction import MASK, keep_or_replace
from app.services.sandboxes import endpoints
from app.services.sandboxes.network_policy import Problems

SERVER_OWNED = ("skill_image", "volume_mount")
# Addresses a config's secrets are sent to (with the Docker engine): a stored secret is
# reused only while they are unchanged (decisions 11).
ENDPOINT_FIELDS = ("api_url", "proxy_url", "sandbox_domain")
# Tenant input that is the operator's now (decisions 11): refused with this message.
OPERATOR_OWNED = {"host": "Docker engines are set by the operator: pick one by name in "
                  "docker.engine", "tls_cert_path": "Docker TLS files are set by the operator "
                  "with the engine: pick one by name in docker.engine"}


def mask(value: Any) -> str:
    """A set secret reads `***`, an unset one "". One that no longer decrypts reads "" too
    but stays a (token-less) LostSecret, so pages can say "needs re-entry"."""
    if isinstance(value, LostSecret):
        return LostSecret()
    return MASK if value else ""


def masked(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy with every set secret replaced by `***` (reference 1.3); a secret that no
    longer decrypts is "" (security.config_secrets.lost lists it).

    Only the containers on the way to a secret are copied (issue 15 item 7: a deep copy
    of every document made long lists slow); other values are shared with `doc`, so
    callers treat the result as read-only or copy what they change."""
    if isinstance(doc, LostMapping):
        return copy.deepcopy(doc)  # keeps its class: nothing of it can be read anyway
    out = dict(doc)
    for kind in ("cube", "e2b"):
        if out.get(kind):
            out[kind] = {**out[kind], "api_key": mask(out[kind].get("api_key"))}
    if out.get("docker"):
        out["docker"] = upgraded_docker(out["docker"])
    out["env_vars"] = {k: mask(v) for k, v in (out.get("env_vars") or {}).items()}
    if isinstance(out.get("network"), dict):
        out["network"] = _masked_network(out["network"])
    return out


def _masked_network(network: dict[str, Any]) -> dict[str, Any]:
    out = dict(network)
    if isinstance(out.get("cube_rules"), list):
        out["cube_rules"] = [
            {**rule, "inject": [{**item, "secret": mask(item.get("secret"))}
                                if isinstance(item, dict) else item
                                for item in rule.get("inject") or []]}
            if isinstance(rule, dict) and "inject" in rule else rule
            for rule in out["cube_rules"]]
    if isinstance(out.get("e2b_host_rules"), list):
        out["e2b_host_rules"] = [
            {**rule, "headers": {k: mask(v) for k, v in (rule.get("headers") or {}).items()}}
            if isinstance(rule, dict) else rule
            for rule in out["e2b_host_rules"]]
    return out


def upgraded_docker(block: dict[str, Any]) -> dict[str, Any]:
    """A stored `docker` block as tenants see it: a config stored with an engine URL
    (before engines were the operator's) reads as the engine's name."""
    out = {k: v for k, v in block.items() if k not in OPERATOR_OWNED}
    out["engine"] = endpoints.engine_of(block)
    return out


def merge(incoming: dict[str, Any], stored: dict[str, Any], *,
          may_reuse: bool = True) -> dict[str, Any]:
    """Bring stored secrets and server-owned fields back into an update (reference 1.3).

    `***` (and, for the API key and env values, "" or absence) keeps a stored secret,
    but only while every address it is sent to is unchanged (decisions 11: the provider's
    API URL, proxy URL and sandbox domain, the Docker engine, a Cube rule's match, an E2B
    host rule's host), and only for a caller who may update the config (`may_reuse`).
    Otherwise each secret that would have been kept is a field error: it must be typed
    again. This is the one place secrets are carried over, for saves, checks and
    template queries alike.
    """
    if not isinstance(incoming, dict):
        return incoming
    out = copy.deepcopy(incoming)
    keep = _Keeper(moved=_moved(incoming, stored), may_reuse=may_reuse)
    for kind in ("cube", "e2b"):
        if isinstance(out.get(kind), dict):
            old = (stored.get(kind) or {}).get("api_key")
            out[kind]["api_key"] = keep(f"{kind}.api_key", out[kind].get("api_key"), old)
    if isinstance(out.get("env_vars"), dict):
        old = stored.get("env_vars") or {}
        out["env_vars"] = {k: keep(f"env_vars.{k}", v, old.get(k))
                           for k, v in out["env_vars"].items()}
    if isinstance(out.get("network"), dict):
        _merge_network(out["network"], stored.get("network") or {}, keep)
    if keep.problems:
        raise ValidationFailed(keep.problems.items)
    if not out.get("skill_rollout"):
        out["skill_rollout"] = stored.get("skill_rollout", "")
    for key in SERVER_OWNED:
        out.pop(key, None)
    return out


def endpoint(doc: dict[str, Any]) -> tuple:
    """Where a config's secrets go: its backend and that backend's addresses."""
    kind = doc.get("sandbox_type")
    kind = kind if isinstance(kind, str) else ""  # an unvalidated update may send anything
    block = doc.get(kind) if isinstance(doc.get(kind), dict) else {}
    if kind == "docker":
        return kind, endpoints.engine_of(block)
    # Compared as spelled (trimmed): a different spelling asks for the secret again,
    # which is only ever stricter than needed.
    return (kind, *(str(block.get(name) or "").strip().rstrip("/") for name in ENDPOINT_FIELDS))


def _moved(incoming: dict[str, Any], stored: dict[str, Any]) -> str:
    """Why stored secrets may not follow this update ("" when they may)."""
    if not stored:
        return ""
    before, after = endpoint(stored), endpoint(incoming)
    if before[0] != after[0]:
        return "the backend changed"
    changed = [name for name, old, new in zip(
        ENDPOINT_FIELDS if after[0] != "docker" else ("engine",), before[1:], after[1:],
        strict=True) if old != new]
    return f"{', '.join(changed)} changed" if changed else ""


class _Keeper:
    """Decides, secret by secret, whether a stored value is kept; collects refusals."""

    def __init__(self, *, moved: str, may_reuse: bool):
        self.moved, self.may_reuse = moved, may_reuse
        self.problems = Problems()

    def __call__(self, field: str, incoming: Any, stored: Any, *, rule_moved: str = "") -> Any:
        keeps = incoming in (None, "", MASK)
        if not keeps:
            return incoming if incoming is not None else ""
        if isinstance(stored, LostSecret):
            # Kept blank it would silently become unset; kept as is it stays unusable.
            self.problems.add(field, "re-enter this secret: the stored value can no longer be "
                              "read (the encryption key changed), or remove it")
            return ""
        if not stored:
            # Nothing to keep here; refuse only what was meant to follow (a masked value
            # after a move, or a rule whose secret stayed behind at its old match).
            if rule_moved or (incoming == MASK and self.moved):
                self.problems.add(field, f"re-enter this secret: {self.moved or rule_moved}, "
                                  "and there is no stored value for the new address")
            return ""
        why = self.moved or rule_moved
        if why:
            self.problems.add(field, f"re-enter this secret: {why}, and a stored secret is "
                              "only sent to the address it was stored with")
        elif not self.may_reuse:
            self.problems.add(field, "send this secret: this caller may not reuse stored "
                              "secrets (only those who may update the config can)")
        return keep_or_replace(incoming, stored) or ""


def _norm(value: Any) -> str:
    return str(value or "").strip().lower()


class _Secrets:
    """Stored secrets by identity: the exact spelling first, then ignoring case and
    surrounding spaces (reference 1.3). Exact-first keeps two rules whose names differ
    only in case (each valid on its own) from swapping secrets on a round trip. Each
    secret carries where it was sent (`place`), to tell a moved rule from a new one."""

    def __init__(self) -> None:
        self.exact: dict[tuple, tuple[Any, Any]] = {}
        self.folded: dict[tuple, tuple[Any, Any]] = {}

    def add(self, owner: Any, name: Any, secret: Any, place: Any = None) -> None:
        self.exact.setdefault((str(owner), str(name)), (secret, place))
        self.folded.setdefault((_norm(owner), _norm(name)), (secret, place))

    def get(self, owner: Any, name: Any) -> tuple[Any, Any]:
        exact = (str(owner), str(name))
        return self.exact[exact] if exact in self.exact else self.folded.get(
            (_norm(owner), _norm(name)), (None, None))


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The dict items of a list; anything else (an unvalidated update) yields nothing."""
    return [item for _, item in _indexed(value)]


def _indexed(value: Any) -> list[tuple[int, dict[str, Any]]]:
    """(index, item) for the dict items of a list: indices as the validator counts them,
    so a refusal names the same path as any other problem of that item."""
    if not isinstance(value, list):
        return []
    return [(index, item) for index, item in enumerate(value) if isinstance(item, dict)]


MATCH_FIELDS = ("host", "sni", "scheme", "path", "methods")


def _match(rule: dict[str, Any]) -> tuple:
    """What decides where a Cube rule injects its secret."""
    methods = rule.get("methods") if isinstance(rule.get("methods"), list) else []
    return (_norm(rule.get("host")), _norm(rule.get("sni")), _norm(rule.get("scheme")),
            str(rule.get("path") or ""), tuple(sorted({_norm(m) for m in methods})))


def _merge_network(network: dict[str, Any], stored: dict[str, Any], keep: _Keeper) -> None:
    inject = _Secrets()
    for rule in _dicts(stored.get("cube_rules")):
        for item in _dicts(rule.get("inject")):
            inject.add(rule.get("name"), item.get("header"), item.get("secret"), _match(rule))
    for r_index, rule in _indexed(network.get("cube_rules")):
        for i_index, item in _indexed(rule.get("inject")):
            old, place = inject.get(rule.get("name"), item.get("header"))
            changed = [name for name, a, b in zip(MATCH_FIELDS, place or (), _match(rule),
                                                   strict=False) if a != b]
            item["secret"] = keep(
                f"network.cube_rules[{r_index}].inject[{i_index}].secret", item.get("secret"),
                old, rule_moved=f"the rule's {', '.join(changed)} changed"
                if changed and old else "")
    headers = _Secrets()
    for rule in _dicts(stored.get("e2b_host_rules")):
        for name, value in (rule.get("headers") or {}).items():
            headers.add(rule.get("host"), name, value)
    hosts = {_norm(rule.get("host")) for rule in _dicts(stored.get("e2b_host_rules"))}
    names = {_norm(name) for rule in _dicts(stored.get("e2b_host_rules"))
             for name, value in (rule.get("headers") or {}).items() if value}
    for r_index, rule in _indexed(network.get("e2b_host_rules")):
        if isinstance(rule.get("headers"), dict):
            rule["headers"] = {
                name: keep(f"network.e2b_host_rules[{r_index}].headers.{name}", value,
                           headers.get(rule.get("host"), name)[0],
                           rule_moved=_host_moved(rule, name, value, hosts, names))
                for name, value in rule["headers"].items()
            }


def _host_moved(rule: dict[str, Any], name: Any, value: Any, hosts: set[str],
                names: set[str]) -> str:
    """Headers are stored by host: under a host never stored, `***` (or a blank for a
    header stored under another host) means a secret was meant to follow the rule to its
    new host, which is refused rather than saved as an empty header."""
    if _norm(rule.get("host")) in hosts:
        return ""
    return "the rule's host changed" if value == MASK or _norm(name) in names else ""
