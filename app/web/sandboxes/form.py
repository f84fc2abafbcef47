"""The sandbox config editor's form <-> the config document (reference 1.2, 1.3, 4.1).

Input names are the document paths the validator reports (`docker.image`,
`network.allow_out[3]`, `network.cube_rules[0].inject[1].header`, `env_vars[2].key`), so
an error finds its input by name. A list row keeps the index it was rendered or added
with: rows added in the browser take fresh indices, removed rows leave gaps, and nothing
is renumbered. Blank rows are dropped when the document is built; `Editor.slot_for` maps
a document path (`network.allow_out[1]`, counted without the blank rows) back to its row.

Secrets never travel to the browser: secret inputs render empty, with a hint when a
value is stored. A blank secret becomes "" in the document, which the service's merge
reads as "keep the stored value"; an env row that is removed is absent, so its key is
deleted (reference 1.3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from flask import current_app
from werkzeug.datastructures import MultiDict

from app.security.config_secrets import LostSecret
from app.security.redaction import MASK
from app.services.sandboxes.document import BACKENDS
from app.web.sandboxes.rows import (
    CHILD,
    FLOAT,
    INT,
    SECRET,
    TEXT,
    WORDS,
    Row,
    host_row,
    norm,
    place,
    put,
    rule_doc,
    rule_row,
    shown,
    with_field,
)

TOP_FIELDS = {"default_timeout_sec": INT, "terminal_idle_disconnect_sec": INT,
              "skill_rollout": TEXT}
CHECKS = ("desktop_enabled", "allow_private_endpoints", "network.deny_egress_by_default")
BLOCK_FIELDS: dict[str, dict[str, str]] = {
    "docker": {"image": TEXT, "engine": TEXT, "http_timeout_sec": INT,
               "idle_ttl_seconds": INT, "cpu_limit": FLOAT, "memory_limit_mb": INT,
               "pids_limit": INT, "disk_limit_mb": INT, "network_mode": TEXT,
               "runtime": TEXT, "warm_pool_size": INT},
    "e2b": {"api_key": SECRET, "api_url": TEXT, "sandbox_domain": TEXT, "proxy_url": TEXT,
            "http_timeout_sec": INT, "template_id": TEXT, "e2b_sandbox_ttl_seconds": INT},
    "cube": {"api_url": TEXT, "proxy_url": TEXT, "sandbox_domain": TEXT, "api_key": SECRET,
             "http_timeout_sec": INT, "dns_servers": WORDS, "template_id": TEXT,
             "cube_sandbox_ttl_seconds": INT},
}
TEMPLATE_FIELD = {"docker": "image", "e2b": "template_id", "cube": "template_id"}
TTL_FIELD = {"docker": "idle_ttl_seconds", "e2b": "e2b_sandbox_ttl_seconds",
             "cube": "cube_sandbox_ttl_seconds"}
ROW = re.compile(r"^(env_vars|network\.allow_out|network\.deny_out|network\.cube_rules|"
                 r"network\.e2b_host_rules)\[(\d{1,5})\](?:\.(\w+))?"
                 r"(?:\[(\d{1,5})\]\.(\w+))?$")


@dataclass
class Editor:
    """The editor form's state: what the inputs hold, row by row."""

    name: str = ""
    description: str = ""
    sandbox_type: str = "docker"
    values: dict[str, str] = field(default_factory=dict)  # scalar inputs by name
    checked: set[str] = field(default_factory=set)
    lists: dict[str, list[Row]] = field(default_factory=lambda: {
        "env_vars": [], "network.allow_out": [], "network.deny_out": [],
        "network.cube_rules": [], "network.e2b_host_rules": []})
    stored: set[str] = field(default_factory=set)  # scalar secrets with a saved value
    typed: set[str] = field(default_factory=set)  # scalar secrets typed, not saved
    lost: set[str] = field(default_factory=set)  # scalar secrets that no longer decrypt
    invalid: list[dict[str, str]] = field(default_factory=list)  # inputs refused as posted
    problems: list[dict[str, str]] = field(default_factory=list)  # + found building the doc
    _kept: dict[str, list[Row]] = field(default_factory=dict, repr=False)

    # -- from the browser ------------------------------------------------------------------

    @classmethod
    def parse(cls, form: MultiDict) -> Editor:
        kind = form.get("sandbox_type", "docker")
        ed = cls(name=form.get("name", ""), description=form.get("description", ""),
                 sandbox_type=kind if kind in BACKENDS else "docker")
        for name in [*TOP_FIELDS, *(f"{kind}.{f}" for f in BLOCK_FIELDS.get(kind, {}))]:
            if name in form:
                ed.values[name] = form.get(name, "")
        ed.checked = {name for name in CHECKS if form.get(name)}
        # PostgreSQL text cannot hold NUL, and no setting needs one: refuse it at the input.
        ed.invalid = [{"field": re.sub(r"(\])\.\w+$", r"\1", key),
                       "message": "must not contain NUL characters"}
                      for key, value in form.items(multi=True) if "\0" in value]
        rows: dict[str, dict[int, Row]] = {key: {} for key in ed.lists}
        for key, value in form.items(multi=False):
            match = ROW.match(key)
            if match:
                place(rows, match, value)
        for key, by_index in rows.items():
            ed.lists[key] = [by_index[i] for i in sorted(by_index)]
            for row in ed.lists[key]:
                row.children.sort(key=lambda child: child.index)
        return ed

    # -- from a stored (masked) document -----------------------------------------------------

    @classmethod
    def from_doc(cls, masked: dict[str, Any], name: str = "", description: str = "") -> Editor:
        """The editor for a masked document: every `***` becomes an empty, stored secret."""
        kind = masked.get("sandbox_type", "docker")
        ed = cls(name=name, description=description, sandbox_type=kind)
        for key in TOP_FIELDS:
            ed.values[key] = shown(masked.get(key))
        block = masked.get(kind) or {}
        for key, kind_of in BLOCK_FIELDS[kind].items():
            value = block.get(key)
            if kind_of == SECRET and value == MASK:
                ed.stored.add(f"{kind}.{key}")
            elif kind_of == SECRET:
                if isinstance(value, LostSecret):
                    ed.lost.add(f"{kind}.{key}")
                continue
            elif kind_of == WORDS:
                ed.values[f"{kind}.{key}"] = ", ".join(value or [])
            else:
                ed.values[f"{kind}.{key}"] = shown(value)
        network = masked.get("network") or {}
        ed.checked = {k for k in ("desktop_enabled", "allow_private_endpoints") if masked.get(k)}
        if network.get("deny_egress_by_default"):
            ed.checked.add("network.deny_egress_by_default")
        ed.lists["env_vars"] = [Row(i, {"key": k, "value": ""}, stored=v == MASK,
                                    lost=isinstance(v, LostSecret))
                                for i, (k, v) in enumerate((masked.get("env_vars") or {}).items())]
        for key in ("allow_out", "deny_out"):
            ed.lists[f"network.{key}"] = [Row(i, {"value": str(v)})
                                          for i, v in enumerate(network.get(key) or [])]
        ed.lists["network.cube_rules"] = [rule_row(i, r)
                                          for i, r in enumerate(network.get("cube_rules") or [])]
        ed.lists["network.e2b_host_rules"] = [
            host_row(i, r) for i, r in enumerate(network.get("e2b_host_rules") or [])]
        return ed

    def for_display(self, masked: dict[str, Any] | None) -> Editor:
        """This form as it may be sent back: typed secrets dropped, stored ones flagged."""
        stored = Editor.from_doc(masked) if masked else Editor()
        self.stored, self.lost = set(stored.stored), set(stored.lost)
        self.typed = {n for n, kind in self._secret_names() if self.values.get(n)}
        for name, _ in self._secret_names():
            self.values.pop(name, None)
        saved_env = {r.get("key") for r in stored.lists["env_vars"] if r.stored}
        lost_env = {r.get("key") for r in stored.lists["env_vars"] if r.lost}
        for row in self.lists["env_vars"]:
            row.typed, row.stored = bool(row.get("value")), row.get("key") in saved_env
            row.lost = row.get("key") in lost_env
            row.values["value"] = ""
        # A rule's secret children (cube inject secrets, e2b header values), known by
        # (rule, header): rule names and hosts are unique in a valid document.
        self._mask_children(stored, "network.cube_rules", "name", "header", "secret")
        self._mask_children(stored, "network.e2b_host_rules", "host", "name", "value")
        return self

    def _mask_children(self, stored: Editor, rows: str, rule_key: str, child_key: str,
                       secret: str) -> None:
        """Drop the typed `secret` of each child row of `rows`, noting whether one was
        typed and whether the stored document has one for the same (rule, child)."""
        saved = {(norm(r.get(rule_key)), norm(c.get(child_key)))
                 for r in stored.lists[rows] for c in r.children if c.stored}
        for row in self.lists[rows]:
            for child in row.children:
                child.typed = bool(child.get(secret))
                child.stored = (norm(row.get(rule_key)), norm(child.get(child_key))) in saved
                child.values[secret] = ""

    def _secret_names(self) -> list[tuple[str, str]]:
        return [(f"{self.sandbox_type}.{k}", kind)
                for k, kind in BLOCK_FIELDS[self.sandbox_type].items() if kind == SECRET]

    # -- to the document ---------------------------------------------------------------------

    def document(self) -> dict[str, Any]:
        """The config document this form describes (blank rows dropped)."""
        kind = self.sandbox_type
        self.problems = list(self.invalid)
        doc: dict[str, Any] = {"sandbox_type": kind}
        for key, kind_of in TOP_FIELDS.items():
            put(doc, key, self.values.get(key, ""), kind_of)
        doc["desktop_enabled"] = "desktop_enabled" in self.checked
        doc["allow_private_endpoints"] = "allow_private_endpoints" in self.checked
        block: dict[str, Any] = {}
        for key, kind_of in BLOCK_FIELDS[kind].items():
            put(block, key, self.values.get(f"{kind}.{key}", ""), kind_of)
        doc[kind] = block
        self._kept = {key: [r for r in rows if not r.blank()] for key, rows in self.lists.items()}
        doc["env_vars"] = self._env()
        doc["network"] = self._network()
        return doc

    def _env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for row in self._kept["env_vars"]:
            key = row.get("key").strip()
            if key in env:
                self.problems.append({"field": f"env_vars[{row.index}]",
                                      "message": f"Variable {key} is listed twice."})
            env[key] = row.get("value")
        return env

    def _network(self) -> dict[str, Any]:
        kept = self._kept
        network: dict[str, Any] = {
            "deny_egress_by_default": "network.deny_egress_by_default" in self.checked,
            "allow_out": [r.get("value") for r in kept["network.allow_out"]],
            "deny_out": [r.get("value") for r in kept["network.deny_out"]],
        }
        rules = kept["network.cube_rules"]
        if rules:
            network["cube_rules"] = [rule_doc(r) for r in rules]
        hosts = kept["network.e2b_host_rules"]
        if hosts:
            network["e2b_host_rules"] = [self._host_doc(r) for r in hosts]
        return network

    def _host_doc(self, row: Row) -> dict[str, Any]:
        headers: dict[str, str] = {}
        for child in row.children:
            name = child.get("name").strip()
            if child.blank():
                continue
            if name in headers:
                self.problems.append({
                    "field": f"network.e2b_host_rules[{row.index}].headers[{child.index}]",
                    "message": f"Header {name} is listed twice."})
            headers[name] = child.get("value")
        return {"host": row.get("host"), "headers": headers}

    # -- errors back onto the form -------------------------------------------------------------

    def slot_for(self, path: str) -> str | None:
        """The input (or row) an error about document `path` belongs to; None: summary only."""
        match = re.match(r"^(network\.(?:allow_out|deny_out|cube_rules|e2b_host_rules))"
                         r"\[(\d+)\](.*)$", path)
        if match:
            return self._row_slot(match.group(1), int(match.group(2)), match.group(3))
        match = re.match(r"^env_vars\.(.*)$", path)
        if match:
            rows = [r for r in self._kept.get("env_vars", []) if r.get("key").strip()
                    == match.group(1)]
            return f"env_vars[{rows[0].index}]" if rows else "env_vars"
        base = re.sub(r"\[\d+\]$", "", path)
        return base if base in self.slots() else None

    def _row_slot(self, key: str, index: int, rest: str) -> str | None:
        rows = self._kept.get(key, [])
        if index >= len(rows):
            return key
        row = rows[index]
        slot = f"{key}[{row.index}]"
        child = re.match(r"^\.inject\[(\d+)\]", rest)
        if child:
            kept = [c for c in row.children if not c.blank()]
            at = int(child.group(1))
            return f"{slot}.inject[{kept[at].index}]" if at < len(kept) else slot
        child = re.match(r"^\.headers\.(.+)$", rest)
        if child:
            named = [c for c in row.children if c.get("name").strip() == child.group(1)]
            return f"{slot}.headers[{named[0].index}]" if named else slot
        return slot

    def slots(self) -> list[str]:
        """Every place an error can be shown in this form, in page order."""
        kind = self.sandbox_type
        shown = [k for k in BLOCK_FIELDS[kind]  # the pool's size only where pools are on
                 if k != "warm_pool_size" or current_app.config["SANDBOX_WARM_POOL_MAX"]]
        out = ["name", "description", "sandbox_type", *(f"{kind}.{k}" for k in shown),
               *(["allow_private_endpoints"] if kind != "docker" else []), *TOP_FIELDS,
               *(["desktop_enabled"] if kind != "docker" else []), "env_vars"]
        out += [f"env_vars[{r.index}]" for r in self.lists["env_vars"]]
        out += ["network", "network.deny_egress_by_default"]
        for key, rows in self.lists.items():
            if key == "env_vars" or not (rows or key in self._rule_lists()):
                continue
            out.append(key)
            for row in rows:
                out.append(f"{key}[{row.index}]")
                out += [f"{key}[{row.index}].{CHILD[key]}[{c.index}]" for c in row.children]
        return out

    def _rule_lists(self) -> tuple[str, ...]:
        """The lists the form always shows (rule lists of another backend only when set)."""
        rules = {"cube": "network.cube_rules", "e2b": "network.e2b_host_rules"}
        return ("network.allow_out", "network.deny_out", *([rules[self.sandbox_type]]
                                                           if self.sandbox_type in rules else []))

    def place(self, errors: list[dict[str, str]]) -> dict[str, list[str]]:
        """Errors by slot (document paths mapped back to their rows); the ones that name no
        input are under "" and show in the summary only. Includes the parsing problems."""
        if not self._kept:
            self.document()
        placed: dict[str, list[str]] = {}
        for item in self.problems:  # these already name a form row
            placed.setdefault(item["field"], []).append(item["message"])
        for item in errors:
            path = item.get("field", "")
            slot = self.slot_for(path)
            placed.setdefault(slot or "", []).append(with_field(path, slot, item["message"]))
        return placed


def form_to_doc(form: MultiDict) -> dict[str, Any]:
    """The config document a posted editor form describes."""
    return Editor.parse(form).document()
