"""Validation errors in the words of the editor: a field named by its label ("Image is
required", "Allowed destination 2: ...") rather than by its document path
(`network.allow_out[1]`, "docker backend requires image").

The path stays in each error's `field` (the machine-readable part the form and API
clients key on); only the sentence a person reads changes. The labels are the editor's
(templates/sandboxes/_editor.html and _editor_backend.html).
"""

from __future__ import annotations

import re
from typing import Any

LABELS = {
    "name": "Name", "description": "Description", "sandbox_type": "Backend",
    "config": "Config", "body": "Request", "docker": "Docker settings",
    "e2b": "E2B settings", "cube": "Cube settings",
    "image": "Image", "engine": "Engine", "cpu_limit": "CPUs",
    "memory_limit_mb": "Memory (MB)", "pids_limit": "Processes", "disk_limit_mb": "Disk (MB)",
    "network_mode": "Network mode", "runtime": "Runtime", "api_key": "API key",
    "api_url": "API URL", "proxy_url": "Proxy URL", "sandbox_domain": "Sandbox domain",
    "template_id": "Template ID", "http_timeout_sec": "HTTP timeout (s)",
    "dns_servers": "DNS servers", "idle_ttl_seconds": "Sandbox TTL (s)",
    "e2b_sandbox_ttl_seconds": "Sandbox TTL (s)", "cube_sandbox_ttl_seconds": "Sandbox TTL (s)",
    "default_timeout_sec": "Exec timeout (s)", "terminal_idle_disconnect_sec": "Terminal idle (s)",
    "skill_rollout": "Skill rollout", "desktop_enabled": "Desktop",
    "allow_private_endpoints": "Allow private endpoints", "env_vars": "Environment",
    "network": "Network policy", "deny_egress_by_default": "Deny egress by default",
    "allow_out": "Allowed destinations", "deny_out": "Denied destinations",
    "cube_rules": "HTTP rules", "e2b_host_rules": "Host header rules",
    "host": "host", "sni": "SNI", "scheme": "scheme", "methods": "methods", "path": "path",
    "audit": "audit", "deny": "action", "inject": "headers", "header": "header name",
    "secret": "header value", "format": "format", "headers": "headers",
}
# One row of a list, by the list's path: "Allowed destination 2".
ROW_NAMES = {
    "network.allow_out": "Allowed destination", "network.deny_out": "Denied destination",
    "network.cube_rules": "HTTP rule", "network.e2b_host_rules": "Host header rule",
    "cube.dns_servers": "DNS server", "env_vars": "Environment variable",
}
# Internal names that appear inside messages, as the editor names them.
IN_TEXT = [
    ("deny_egress_by_default", "“Deny egress by default”"),
    ("allow_out", "Allowed destinations"), ("deny_out", "Denied destinations"),
    ("cube_rules", "HTTP rules"), ("e2b_host_rules", "Host header rules"),
    ("skill_rollout", "Skill rollout"), ("next_turn", "Next turn"),
    ("new_session", "New session"),
]
_STEM = re.compile(r"^(is|must|needs|has|cannot|can't|may) ")
_ROW = re.compile(r"^(network\.(?:allow_out|deny_out|cube_rules|e2b_host_rules)|"
                  r"cube\.dns_servers|env_vars)\[(\d+)\](.*)$")


def label(path: str) -> str:
    """The label a person knows a document path by."""
    row = _ROW.match(path)
    if row:
        name = f"{ROW_NAMES[row.group(1)]} {int(row.group(2)) + 1}"
        return _within(name, row.group(3))
    if path.startswith("env_vars."):
        return f"Environment variable {path.split('.', 1)[1]}"
    last = re.sub(r"\[\d+\]$", "", path).rsplit(".", 1)[-1]
    if last in LABELS:
        text = LABELS[last]
        return text[0].upper() + text[1:]
    return _words(last)


def _within(row: str, rest: str) -> str:
    """`.inject[1].header` of HTTP rule 1 -> "HTTP rule 1, header 2 name"."""
    if not rest:
        return row
    inner = re.match(r"^\.(inject|methods)\[(\d+)\](?:\.(\w+))?$", rest)
    if inner:
        kind, index, part = inner.groups()
        noun = "header" if kind == "inject" else "method"
        detail = {"header": " name", "secret": " value", "format": " format"}.get(part or "", "")
        return f"{row}, {noun} {int(index) + 1}{detail}"
    header = re.match(r"^\.headers\.(.+)$", rest)
    if header:
        return f"{row}, header “{header.group(1)}”"
    part = rest.lstrip(".")
    return f"{row}, {LABELS.get(part, _words(part).lower())}"


def _words(name: str) -> str:
    words = [{"api": "API", "url": "URL", "id": "ID", "sec": "(s)", "mb": "(MB)"}.get(w, w)
             for w in name.split("_") if w]
    text = " ".join(words) or name
    return text[0].upper() + text[1:]


def sentence(path: str, message: str) -> str:
    """One error as the sentence a person reads: "Image is required."."""
    if message.startswith("Unknown field"):
        return f"Unknown field “{path}”: remove it."
    text = message.strip()
    for name, shown in IN_TEXT:
        text = re.sub(rf"\b{name}\b", shown, text)
    text = re.sub(r" or instance of \w+$", "", text)  # pydantic's class names are ours
    name = label(path)
    if _STEM.match(text):
        out = f"{name} {text}"
    elif text.lower().startswith(name.lower()):
        out = text
    else:
        out = f"{name}: {text[0].lower() + text[1:] if _lower_ok(text) else text}"
    return out if out.endswith((".", "?", "!")) else out + "."


def _lower_ok(text: str) -> bool:
    """Lower-case the first letter of a plain word, not of a name like "E2B" or "URL"."""
    first = text.split(" ", 1)[0]
    return first[:1].isupper() and first[1:].islower()


def labelled(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same errors, each message a sentence that names its field by label."""
    return [{**item, "message": sentence(str(item.get("field", "")), str(item["message"]))}
            for item in errors]
