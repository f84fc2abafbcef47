"""Explain a destination (issue 24 item 4): the verdict a config's egress policy gives a
host, the rule that decides it, and the addresses the name resolves to now.

The rules are ours (reference 4.2 and 4.3), so this answers for every backend, in the
order each enforces them:

- Docker (app/backends/docker/egress/policy.py): `network_mode: none` has no network; a
  name in `allow_out` (exact, or `*.suffix` for subdomains, not the apex) is resolved
  and its globally reachable addresses are opened; under deny-by-default any other name
  is not even resolved. An address is then decided by the built-in special-use ranges
  (some never open, the others only when `allow_out` names them), then allow > deny >
  default.
- E2B and Cube: allow > deny > default, enforced by the provider's own network (its
  treatment of private and metadata addresses is its own, and the answer says so); on
  Cube a matching `cube_rules` entry decides the requests it matches first.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from app.backends.base import BackendError
from app.backends.docker.egress import dns_answer
from app.backends.docker.egress.settings import EgressSettings
from app.errors import ValidationFailed
from app.security import special_ranges
from app.services.sandboxes import network_policy
from app.services.sandboxes.targets import Target, TargetError, classify

ADDRESSES_MAX = 8


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    rule: str  # "allow_out[2] *.example.org", "default deny", "built-in: loopback"
    reason: str  # a sentence a person reads

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": "allowed" if self.allowed else "denied", "rule": self.rule,
                "reason": self.reason}


def _target(host: Any) -> Target:
    if not isinstance(host, str) or not host.strip():
        raise ValidationFailed.one("host", "Name a host or an IPv4 address.")
    try:
        target = classify(host, wildcard_ok=False)
    except TargetError as exc:
        raise ValidationFailed.one("host", f"{host.strip()!r} {exc}") from None
    if target.kind == "ip" and not target.key.endswith("/32"):
        raise ValidationFailed.one("host", "Name one address, not a range.")
    return target


def _port(port: Any) -> int | None:
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValidationFailed.one("port", "A port is a whole number from 1 to 65535.")
    return port


def _entries(network: dict, key: str) -> list[tuple[int, str, Target]]:
    out = []
    for index, raw in enumerate(network.get(key) or []):
        try:
            out.append((index, raw.strip(), classify(raw, wildcard_ok=key == "allow_out")))
        except (TargetError, AttributeError):
            continue  # a stored policy was validated; an unsaved one is validated first
    return out


def _name_matches(name: str, target: Target) -> bool:
    if target.wildcard:
        return name.endswith("." + target.key[2:])
    return name == target.key


class Policy:
    """One config's policy, read for decisions with the rules' positions kept."""

    def __init__(self, doc: dict[str, Any]):
        self.backend = doc["sandbox_type"]
        self.network = doc.get("network") or {}
        self.allow = _entries(self.network, "allow_out")
        self.deny = _entries(self.network, "deny_out")
        self.no_network = self.backend == "docker" and (
            (doc.get("docker") or {}).get("network_mode") == "none")
        self.deny_all = network_policy.denies_by_default(self.network)

    def _default(self) -> Verdict:
        if self.network.get("deny_egress_by_default"):
            return Verdict(False, "default deny", "“Deny egress by default” is on and no "
                           "entry of Allowed destinations names it.")
        for index, raw, target in self.deny:
            if target.is_deny_all:
                return Verdict(False, f"deny_out[{index}] {raw}", f"{raw} in Denied destinations "
                               "denies every destination that Allowed destinations does not "
                               "name.")
        return Verdict(True, "default allow", "Egress is open by default and no rule "
                       "denies it.")

    def address(self, address: str, shown: str | None = None) -> Verdict:
        """The verdict for one address; `shown` is how the sentence names it."""
        ip = ipaddress.IPv4Address(address)
        special = special_ranges.special_range(ip) if self.backend == "docker" else None
        address = shown or address
        if special is not None and special.never:
            return Verdict(False, f"built-in: {special.name}", f"{address} is {special.name}, "
                           "which no rule opens.")
        for index, raw, target in self.allow:
            if target.kind != "ip":
                continue
            network = ipaddress.IPv4Network(target.key)
            if ip in network and (special is None or special_ranges.opens_by_naming(network)):
                return Verdict(True, f"allow_out[{index}] {raw}", f"{raw} in Allowed "
                               f"destinations allows {address}.")
        if special is not None:
            return Verdict(False, f"built-in: {special.name}", f"{address} is {special.name}: "
                           "it opens only where Allowed destinations names it (an address or a "
                           "range inside it), never through a broad range or a name.")
        for index, raw, target in self.deny:
            if ip in ipaddress.IPv4Network(target.key) and not target.is_deny_all:
                return Verdict(False, f"deny_out[{index}] {raw}", f"{raw} in Denied destinations "
                               f"denies {address}.")
        return self._default()

    def cube_rule(self, name: str) -> Verdict | None:
        if self.backend != "cube":
            return None
        for index, rule in enumerate(self.network.get("cube_rules") or []):
            for field in ("host", "sni"):
                value = str(rule.get(field) or "").strip().lower().split(":")[0]
                if not value:
                    continue
                wildcard = value.startswith("*.")
                if value == name or (wildcard and name.endswith(value[1:])):
                    label = f"cube_rules[{index}] {rule.get('name', '')!s}".rstrip()
                    if rule.get("deny"):
                        return Verdict(False, label, f"The Cube rule “{rule.get('name')}” "
                                       f"denies requests to {name} that match its other "
                                       "fields.")
                    return Verdict(True, label, f"The Cube rule “{rule.get('name')}” allows "
                                   f"requests to {name} that match its other fields.")
        return None

    def name(self, name: str) -> Verdict | None:
        """The verdict for the name itself, or None when its addresses decide."""
        for index, raw, target in self.allow:
            if target.kind == "domain" and _name_matches(name, target):
                return Verdict(True, f"allow_out[{index}] {raw}", f"{name} matches {raw} in "
                               "Allowed destinations.")
        if self.deny_all:
            verdict = self._default()
            how = (" The sandbox's resolver does not even resolve it."
                   if self.backend == "docker" else "")
            return Verdict(False, verdict.rule, f"{name} is not in Allowed destinations, and "
                           f"{verdict.reason[0].lower()}{verdict.reason[1:]}{how}")
        return None


def _resolve(name: str) -> tuple[list[str], str | None]:
    """The IPv4 addresses `name` has now, through the upstream the sandboxes' resolver
    forwards to; (addresses, why there are none)."""
    try:
        upstream = EgressSettings.from_env().upstream
    except BackendError:
        upstream = None
    if not upstream:
        return [], "no DNS upstream is configured on this deployment"
    found = dns_answer.addresses(upstream, name)
    if found is None:
        return [], "the name could not be looked up now"
    return found[:ADDRESSES_MAX], None if found else "the name has no IPv4 address now"


def _address_entry(policy: Policy, address: str) -> dict[str, Any]:
    """One resolved address and its verdict. A special-use answer is not shown, only its
    range: what this deployment's resolver knows of internal names is not the tenant's."""
    special = special_ranges.special_range(address)
    if special is None:
        return {"address": address, "range": None, **policy.address(address).as_dict()}
    return {"address": None, "range": special.name,
            **policy.address(address, f"an address in a {special.name} range").as_dict()}


def _note(backend: str) -> str | None:
    if backend == "docker":
        return None
    return (f"{backend.upper() if backend == 'e2b' else backend.capitalize()} enforces these "
            "rules in its own network; how it treats private and metadata addresses is the "
            "provider's, and names are resolved there, not here.")


def explain(doc: dict[str, Any], host: Any, port: Any = None) -> dict[str, Any]:
    """The verdict for `host` (and `port`) under the config document `doc`."""
    target, port = _target(host), _port(port)
    policy = Policy(doc)
    answer: dict[str, Any] = {"host": target.key.removesuffix("/32"), "port": port,
                              "backend": policy.backend, "addresses": [],
                              "resolution": None, "note": _note(policy.backend)}
    if policy.no_network:
        return {**answer, **Verdict(False, "docker.network_mode none", "This config's "
                                    "sandboxes have no network at all.").as_dict()}
    if target.kind == "ip":
        return {**answer, **policy.address(answer["host"]).as_dict()}
    name = target.key
    addresses, why_none = _resolve(name)
    by_address = [_address_entry(policy, a) for a in addresses]
    answer.update(addresses=by_address, resolution=why_none)
    decided = policy.cube_rule(name) or policy.name(name)
    if decided is not None and decided.allowed and policy.backend == "docker" and addresses:
        # An allowed name opens only its globally reachable addresses (DNS rebinding).
        reachable = [a for a in by_address if a["range"] is None or a["verdict"] == "allowed"]
        for entry in by_address:
            if entry["range"] is None:
                entry.update(Verdict(True, decided.rule, f"{entry['address']} is an answer "
                                     f"for {name}, which Allowed destinations allows.").as_dict())
        if not reachable:
            return {**answer, "verdict": "denied", "rule": by_address[0]["rule"],
                    "reason": f"{name} is allowed, but every address it has now is a "
                              "special-use one, which a name never opens."}
    if decided is not None:
        return {**answer, **decided.as_dict()}
    if not addresses:
        return {**answer, "verdict": "unresolved", "rule": "addresses decide",
                "reason": f"No rule names {name}, so its addresses decide, and "
                          f"{why_none}."}
    first = next((a for a in by_address if a["verdict"] == "allowed"), by_address[0])
    return {**answer, "verdict": first["verdict"], "rule": first["rule"],
            "reason": f"No rule names {name}, so its addresses decide: "
                      + first["reason"][0].lower() + first["reason"][1:]}


def explain_unsaved(raw: Any, host: Any, port: Any = None) -> dict[str, Any]:
    """The same for a config not saved yet (the editor's form): its policy is validated
    first, as a save would."""
    if not isinstance(raw, dict) or raw.get("sandbox_type") not in ("docker", "e2b", "cube"):
        raise ValidationFailed.one("config.sandbox_type", "Choose docker, e2b or cube.")
    problems = network_policy.Problems()
    network = network_policy.validate(raw.get("network"), raw["sandbox_type"], problems,
                                      "config.network")
    if problems:
        raise ValidationFailed(problems.items)
    docker = raw.get("docker") if isinstance(raw.get("docker"), dict) else {}
    return explain({"sandbox_type": raw["sandbox_type"], "network": network or {},
                    "docker": {"network_mode": docker.get("network_mode")}}, host, port)
