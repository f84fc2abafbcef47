"""The sandbox network policy: validate (reference 4.2), resolve (4.3); entries are
classified by `targets`.

Validation collects every problem with its field path so a form can show them all at
once. The same classifier serves allow_out, deny_out, cube rule hosts/SNIs and e2b
host rules, exactly as the reference describes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.services.sandboxes.targets import Target, TargetError, classify

DENY_ALL = "0.0.0.0/0"
HTTP_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE"}
SCHEMES = {"", "http", "https"}
AUDIT_LEVELS = {"", "none", "metadata", "full"}
TOKEN_SEPARATORS = set('()<>@,;:\\"/[]?={}')
E2B_MAX_RULES, E2B_MAX_HOST, E2B_MAX_HEADERS = 10, 128, 20
E2B_MAX_HEADER_NAME, E2B_MAX_HEADER_VALUE = 64, 2048

@dataclass
class Problems:
    """Collected validation errors as [{field, message}]."""

    items: list[dict[str, str]] = field(default_factory=list)

    def add(self, path: str, message: str) -> None:
        self.items.append({"field": path, "message": message})

    def __bool__(self) -> bool:
        return bool(self.items)


def validate(network: Any, backend: str, problems: Problems, path: str = "network") -> dict | None:
    """Validate `network` for `backend`; return the normalised document to store, or None.

    Every problem is added to `problems` (a bad field does not hide the others); the
    returned document is only meant to be stored when no problem was added.
    """
    if network is None:
        return None
    if not isinstance(network, dict):
        problems.add(path, "must be an object")
        return None
    doc = _fields(network, FIELDS, problems, path)
    _check_backend(doc, backend, problems, path)
    allow = _check_allow(doc["allow_out"], problems, f"{path}.allow_out")
    deny = _check_deny(doc["deny_out"], problems, f"{path}.deny_out")
    denies_all = doc["deny_egress_by_default"] or any(t.is_deny_all for t in deny)
    if any(t.kind == "domain" for t in allow) and not denies_all:
        problems.add(f"{path}.allow_out", "Domains need a deny-all fallback: turn on "
                     "deny_egress_by_default or add 0.0.0.0/0 to deny_out; otherwise "
                     "destinations not learned through DNS stay open.")
    doc["cube_rules"] = _check_cube_rules(doc["cube_rules"], problems, f"{path}.cube_rules")
    doc["e2b_host_rules"] = _check_e2b_rules(doc["e2b_host_rules"], allow, problems,
                                             f"{path}.e2b_host_rules")
    doc["allow_public_inbound"] = False  # legacy: accepted, never stored as true
    return doc


# Field name -> expected type; a missing or null field takes the type's empty value.
FIELDS = {
    "deny_egress_by_default": bool, "allow_public_inbound": bool, "allow_out": list,
    "deny_out": list, "cube_rules": list, "e2b_host_rules": list,
}
CUBE_RULE_FIELDS = {
    "name": str, "scheme": str, "sni": str, "host": str, "methods": list, "path": str,
    "deny": bool, "audit": str, "inject": list,
}
INJECT_FIELDS = {"header": str, "secret": str, "format": str}
E2B_RULE_FIELDS = {"host": str, "headers": dict}
TYPE_NAMES = {bool: "true or false", list: "a list", str: "a string", dict: "an object"}


def _fields(raw: dict, spec: dict[str, type], problems: Problems, path: str) -> dict[str, Any]:
    """`raw` reduced to the fields of `spec`, each of the right type or its empty value.

    Unknown fields and wrong types are reported, so the stored shape is always complete
    and well typed (masking, merging and resolution rely on it).
    """
    doc: dict[str, Any] = {key: kind() for key, kind in spec.items()}
    for key, value in raw.items():
        expected = spec.get(key)
        if expected is None:
            problems.add(f"{path}.{key}", "Unknown field.")
        elif value is None:
            continue
        elif not isinstance(value, expected):
            problems.add(f"{path}.{key}", f"must be {TYPE_NAMES[expected]}")
        else:
            doc[key] = value
    return doc


def _objects(items: list, spec: dict[str, type], problems: Problems,
             path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, fields) for each entry of a list of objects, read with `_fields`; an entry
    that is not an object is reported and skipped."""
    for index, raw in enumerate(items):
        where = f"{path}[{index}]"
        if not isinstance(raw, dict):
            problems.add(where, "must be an object")
            continue
        yield where, _fields(raw, spec, problems, where)


def _check_backend(doc: dict, backend: str, problems: Problems, path: str) -> None:
    """Reference 4.2 rule 2 with decisions 5: Docker enforces allow_out and deny_out
    itself, but has no L7 rules. The reference restricts only Docker, so cube_rules on
    an e2b config (or e2b_host_rules on a cube one) are validated, not refused."""
    if backend != "docker":
        return
    for key in ("cube_rules", "e2b_host_rules"):
        if doc[key]:
            problems.add(f"{path}.{key}", f"The docker backend does not support {key}: clear "
                         "them, or switch this config to cube or e2b.")


def _entries(values: list, problems: Problems, path: str, wildcard_ok: bool):
    for index, value in enumerate(values):
        if not isinstance(value, str):
            problems.add(f"{path}[{index}]", "must be a string")
            continue
        try:
            yield index, value, classify(value, wildcard_ok=wildcard_ok)
        except TargetError as exc:
            problems.add(f"{path}[{index}]", f"{value.strip()!r} {exc}")


def _check_allow(values: list, problems: Problems, path: str) -> list[Target]:
    return _unique(_entries(values, problems, path, wildcard_ok=True), problems, path)


def _check_deny(values: list, problems: Problems, path: str) -> list[Target]:
    targets = []
    for index, value, target in _entries(values, problems, path, wildcard_ok=False):
        if target.kind == "domain":
            problems.add(f"{path}[{index}]", f"{value.strip()!r} is not an IPv4 address or "
                         "CIDR, the only kinds denied destinations take; to block domains, deny "
                         "by default and list what is allowed in allow_out.")
        else:
            targets.append((index, value, target))
    return _unique(iter(targets), problems, path)


def _unique(entries, problems: Problems, path: str) -> list[Target]:
    seen: dict[str, str] = {}
    targets = []
    for index, value, target in entries:
        if target.key in seen:
            problems.add(f"{path}[{index}]", f"duplicate: {seen[target.key]!r} and "
                         f"{value.strip()!r} are the same target ({target.key})")
            continue
        seen[target.key] = value.strip()
        targets.append(target)
    return targets


def is_http_token(name: str) -> bool:
    return bool(name) and all(33 <= ord(ch) <= 126 and ch not in TOKEN_SEPARATORS for ch in name)


def has_control(value: str) -> bool:
    return any(ch in value for ch in "\r\n\0")


def _check_cube_rules(rules: list, problems: Problems, path: str) -> list[dict[str, Any]]:
    names: set[str] = set()
    out = []
    for where, rule in _objects(rules, CUBE_RULE_FIELDS, problems, path):
        name = rule["name"].strip()
        if not name:
            problems.add(f"{where}.name", "is required")
        elif name in names:
            problems.add(f"{where}.name", f"duplicate rule name {name!r}")
        names.add(name)
        _check_cube_match(rule, problems, where)
        rule["inject"] = _check_inject(rule, problems, where)
        out.append(rule)
    return out


def _check_cube_match(rule: dict, problems: Problems, where: str) -> None:
    host, sni = rule["host"].strip(), rule["sni"].strip()
    if not host and not sni:
        problems.add(where, "needs a host or an sni: rules without one are never reached")
    if host:
        _classify_into(re.sub(r":\d*$", "", host), f"{where}.host", problems)
    if sni:
        target = _classify_into(sni, f"{where}.sni", problems)
        if target is not None and target.kind != "domain":
            problems.add(f"{where}.sni", "must be a domain, not an IP")
    if rule["scheme"].strip().lower() not in SCHEMES:
        problems.add(f"{where}.scheme", "must be http or https (or empty)")
    if rule["audit"].strip().lower() not in AUDIT_LEVELS:
        problems.add(f"{where}.audit", "must be none, metadata or full (or empty)")
    for m_index, method in enumerate(rule["methods"]):
        if _text(method).upper() not in HTTP_METHODS:
            problems.add(f"{where}.methods[{m_index}]",
                         f"must be one of {' '.join(sorted(HTTP_METHODS))}")


def _check_inject(rule: dict, problems: Problems, where: str) -> list[dict[str, Any]]:
    headers: set[str] = set()
    out = []
    for at, item in _objects(rule["inject"], INJECT_FIELDS, problems, f"{where}.inject"):
        header = item["header"].strip()
        if not is_http_token(header):
            problems.add(f"{at}.header", "must be a valid HTTP header name")
        elif header in headers:
            problems.add(f"{at}.header", f"duplicate header {header!r} in this rule")
        headers.add(header)
        for key in ("secret", "format"):
            if has_control(item[key]):
                problems.add(f"{at}.{key}", "must not contain CR, LF or NUL")
        if rule["deny"] and item["secret"]:
            problems.add(f"{at}.secret", "a deny rule never injects: remove the secret")
        out.append(item)
    return out


def _check_e2b_rules(rules: list, allow: list[Target], problems: Problems,
                     path: str) -> list[dict[str, Any]]:
    if len(rules) > E2B_MAX_RULES:
        problems.add(path, f"at most {E2B_MAX_RULES} host rules")
    seen: set[str] = set()
    out = []
    for where, rule in _objects(rules, E2B_RULE_FIELDS, problems, path):
        host = rule["host"].strip()
        if not host:
            problems.add(f"{where}.host", "is required")
        elif len(host) > E2B_MAX_HOST:
            problems.add(f"{where}.host", f"at most {E2B_MAX_HOST} characters")
        else:
            target = _classify_into(host, f"{where}.host", problems)
            if target is not None:
                _check_e2b_host(target, allow, seen, problems, f"{where}.host")
        _check_e2b_headers(rule["headers"], problems, f"{where}.headers")
        out.append(rule)
    return out


def _check_e2b_host(target: Target, allow: list[Target], seen: set[str], problems: Problems,
                    where: str) -> None:
    if target.kind != "domain":
        problems.add(where, "must be a domain, not an IP")
        return
    if target.key in seen:
        problems.add(where, f"duplicate host {target.key!r}")
    seen.add(target.key)
    if not covered(target.key, allow):
        problems.add(where, f"{target.key!r} is not allowed by allow_out: a host rule grants no "
                     "egress by itself")


def covered(key: str, allow: list[Target]) -> bool:
    """Exact key in allow_out, or an allow_out `*.suffix` with key ending in `.suffix`."""
    for target in allow:
        if target.key == key:
            return True
        if target.wildcard and key.endswith("." + target.key[2:]):
            return True
    return False


def _check_e2b_headers(headers: dict, problems: Problems, where: str) -> None:
    if len(headers) > E2B_MAX_HEADERS:
        problems.add(where, f"at most {E2B_MAX_HEADERS} headers")
    for name, value in headers.items():
        at = f"{where}.{name}"
        clean = str(name).strip()
        if not clean:
            problems.add(at, "header name must not be empty")
        elif len(clean) > E2B_MAX_HEADER_NAME:
            problems.add(at, f"header name at most {E2B_MAX_HEADER_NAME} characters")
        elif not is_http_token(clean):
            problems.add(at, "must be a valid HTTP header name")
        if not isinstance(value, str):
            problems.add(at, "value must be a string")
        elif has_control(value):
            problems.add(at, "value must not contain CR, LF or NUL")
        elif len(value) > E2B_MAX_HEADER_VALUE:
            problems.add(at, f"value at most {E2B_MAX_HEADER_VALUE} characters")


def _classify_into(value: str, where: str, problems: Problems) -> Target | None:
    try:
        return classify(value, wildcard_ok=True)
    except TargetError as exc:
        problems.add(where, f"{value!r} {exc}")
        return None


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def canonical_deny_out(deny_out: list[str]) -> list[str]:
    """Every IPv4 /0 becomes exactly 0.0.0.0/0 (providers string-match it); other
    entries pass through unchanged."""
    out = []
    for entry in deny_out:
        try:
            target = classify(entry, wildcard_ok=False) if isinstance(entry, str) else None
        except TargetError:
            target = None
        out.append(DENY_ALL if target is not None and target.is_deny_all else entry)
    return out


def denies_by_default(network: dict | None) -> bool:
    """deny_egress_by_default, or any IPv4 /0 in deny_out: the two forms are equivalent."""
    if not isinstance(network, dict):
        return False
    deny_out = network.get("deny_out")
    return network.get("deny_egress_by_default") is True or DENY_ALL in canonical_deny_out(
        deny_out if isinstance(deny_out, list) else []
    )
