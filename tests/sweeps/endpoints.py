"""The endpoint-swap sweep (issue 9 item 2): every route that may send a stored secret to
an address is called with that address swapped for an attacker's and the secret left as
`***` (or blank), and must refuse without writing or contacting anything.

SECRET_ROUTES names those routes with how to call them. `unlisted_secret_routes` finds
the ones that take a config document (an API body with `config`, a browser form read by
the sandbox editor) so that a new such route cannot escape the sweep.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Flask

from app.extensions import db
from app.models import SandboxConfig
from app.services.sandboxes import document as sandbox_doc
from tests.sweeps.routes import Route, view_of

SECRET = f"sweep-bound-secret-{uuid.uuid4().hex[:10]}"
MASKS = ("***", "")
STORED_API = "http://127.0.0.1:9"


@dataclass(frozen=True)
class Swap:
    """One address a secret is sent to, and how the attacker changes it."""

    name: str
    kind: str  # the stored config's backend
    swap: Callable[[dict[str, Any], Any], None]  # (document, the recording fake) -> None


def _block(field: str) -> Callable[[dict[str, Any], Any], None]:
    def swap(doc: dict[str, Any], evil: Any) -> None:
        kind = doc["sandbox_type"]
        doc[kind][field] = {"api_url": evil.api_url, "proxy_url": evil.gateway_url,
                            "sandbox_domain": evil.domain, "engine": "missing"}[field]
    return swap


def _rule_host(doc: dict[str, Any], evil: Any) -> None:
    rules = "cube_rules" if doc["sandbox_type"] == "cube" else "e2b_host_rules"
    doc["network"][rules][0]["host"] = EVIL_HOST


EVIL_HOST = "evil.example.com"
SWAPS = (
    Swap("e2b-api_url", "e2b", _block("api_url")),
    Swap("e2b-proxy_url", "e2b", _block("proxy_url")),
    Swap("e2b-sandbox_domain", "e2b", _block("sandbox_domain")),
    Swap("e2b-host-rule-host", "e2b", _rule_host),
    Swap("cube-api_url", "cube", _block("api_url")),
    Swap("cube-rule-host", "cube", _rule_host),
    Swap("docker-engine", "docker", _block("engine")),
)


def _doc(kind: str, secret: str) -> dict[str, Any]:
    """The stored document of `kind`, with `secret` wherever a secret goes."""
    network: dict[str, Any] = {"deny_egress_by_default": True,
                               "allow_out": ["api.example.com", EVIL_HOST]}
    doc: dict[str, Any] = {"sandbox_type": kind, "allow_private_endpoints": True,
                           "env_vars": {"SWEEP_TOKEN": secret}, "network": network}
    if kind == "e2b":
        doc["e2b"] = {"api_key": secret, "template_id": "base", "api_url": STORED_API}
        network["e2b_host_rules"] = [{"host": "api.example.com",
                                      "headers": {"X-Key": secret}}]
    elif kind == "cube":
        doc["cube"] = {"api_key": secret, "template_id": "base", "api_url": STORED_API,
                       "proxy_url": STORED_API, "sandbox_domain": "cube.test"}
        network["cube_rules"] = [{"name": "api", "host": "api.example.com",
                                  "inject": [{"header": "Authorization", "secret": secret}]}]
    else:
        doc["docker"] = {"image": "sandlot/sandbox:base", "engine": "local"}
    return doc


def stored_config(tenant_id: int, kind: str) -> str:
    """A config holding SECRET in every secret field, at its stored addresses."""
    doc = sandbox_doc.validate(_doc(kind, SECRET), resolve_urls=False)
    row = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant_id, name=f"swap {kind}",
                        description="", sandbox_type=kind, config=doc)
    db.session.add(row)
    db.session.commit()
    return row.id


def swapped_doc(swap: Swap, evil: Any, mask: str) -> dict[str, Any]:
    """The API document: the stored one, one address swapped, every secret masked."""
    doc = _doc(swap.kind, mask)
    swap.swap(doc, evil)
    return doc


def swapped_form(swap: Swap, evil: Any, mask: str, config_id: str) -> dict[str, str]:
    """The editor form as the browser posts it, with the same swap."""
    doc = swapped_doc(swap, evil, mask)
    kind, network = doc["sandbox_type"], doc["network"]
    form = {"config_id": config_id, "name": f"swap {kind}", "description": "",
            "sandbox_type": kind, "allow_private_endpoints": "y",
            "network.deny_egress_by_default": "y",
            "env_vars[0].key": "SWEEP_TOKEN", "env_vars[0].value": mask}
    form.update({f"{kind}.{k}": str(v) for k, v in doc[kind].items()})
    form.update({f"network.allow_out[{i}]": v for i, v in enumerate(network["allow_out"])})
    for rule in network.get("cube_rules", []):
        form.update({"network.cube_rules[0].name": rule["name"],
                     "network.cube_rules[0].host": rule["host"],
                     "network.cube_rules[0].action": "allow",
                     "network.cube_rules[0].inject[0].header": "Authorization",
                     "network.cube_rules[0].inject[0].secret": mask})
    for rule in network.get("e2b_host_rules", []):
        form.update({"network.e2b_host_rules[0].host": rule["host"],
                     "network.e2b_host_rules[0].headers[0].name": "X-Key",
                     "network.e2b_host_rules[0].headers[0].value": mask})
    return form


@dataclass(frozen=True)
class SecretRoute:
    endpoint: str
    # (config id, swap, the recording fake, mask) -> (path, json body or None, form or None)
    request: Callable[[str, Swap, Any, str], tuple[str, Any, Any]]
    # A refusal as this route answers it: (status, text that names the refused secret)
    refusal_status: int


def _api(path: str, with_name: bool = False):
    def build(config_id: str, swap: Swap, evil: Any, mask: str):
        body: dict[str, Any] = {"config": swapped_doc(swap, evil, mask)}
        if with_name:
            body["name"] = "swapped"
            return path.format(config_id=config_id), body, None
        body["config_id"] = config_id
        return path, body, None
    return build


def _web(path: str, **extra: str):
    def build(config_id: str, swap: Swap, evil: Any, mask: str):
        return path.format(config_id=config_id), None, {
            **swapped_form(swap, evil, mask, config_id), **extra}
    return build


SECRET_ROUTES = (
    SecretRoute("api.update_sandbox_config",
                _api("/api/v1/sandbox-configs/{config_id}", with_name=True), 400),
    SecretRoute("api.query_templates", _api("/api/v1/sandbox-configs/templates/query"), 400),
    SecretRoute("api.sandbox_check_endpoint", _api("/api/v1/system/sandbox-check"), 400),
    SecretRoute("web.update_sandbox", _web("/sandboxes/{config_id}/edit"), 400),
    # The catalog picker answers its fragment with the problems in it.
    SecretRoute("web.sandbox_form_templates", _web("/sandboxes/editor/templates"), 200),
    SecretRoute("web.start_sandbox_check", _web("/sandboxes/check"), 400),
    # Ensure/Rebuild a template: the build calls carry the stored key (decisions 11).
    SecretRoute("web.build_sandbox_template", _web("/sandboxes/editor/templates/build",
                                                   template_role="standard",
                                                   template_action="ensure"), 400),
)
# Routes that read a config document but send nothing anywhere (they only render or
# validate with URLs unresolved), and creation, which has no stored secret to keep.
SENDS_NOTHING = {"web.sandbox_form_backend", "web.sandbox_form_validate",
                 "web.create_sandbox", "api.create_sandbox_config",
                 # explain reads only the policy, and asks the deployment's DNS upstream
                 "web.sandbox_form_explain", "api.explain_unsaved_destination"}


def takes_a_config(app: Flask, route: Route) -> bool:
    """An API route whose body has `config`, or a browser route the editor form posts to."""
    if not route.mutating:
        return False
    view = view_of(app, route)
    info = getattr(view, "api_doc", None)
    if route.is_api:
        return info is not None and info.request is not None and \
            "config" in info.request.model_json_schema().get("properties", {})
    source = inspect.getsource(inspect.unwrap(view))
    return "Editor.parse" in source or "_save(" in source


def unlisted_secret_routes(app: Flask, routes: list[Route]) -> list[str]:
    listed = {r.endpoint for r in SECRET_ROUTES} | SENDS_NOTHING
    return sorted(r.id for r in routes if takes_a_config(app, r) and r.endpoint not in listed)
