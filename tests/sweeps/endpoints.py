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
from app.services import sandbox_doc
from tests.sweeps.routes import Route, view_of

SECRET = f"sweep-bound-secret-{uuid.uuid4().hex[:10]}"
MASKS = ("***", "")
STORED_API = "http://127.0.0.1:9"


@dataclass(frozen=True)
class Swap:
    """One address a secret is sent to, and the attacker's value for it."""

    name: str
    kind: str  # the stored config's backend
    field: str  # the document path of the address
    value: Callable[[Any], str]  # the attacker's address, from the fake that records


SWAPS = (
    Swap("e2b-api_url", "e2b", "e2b.api_url", lambda evil: evil.api_url),
    Swap("e2b-proxy_url", "e2b", "e2b.proxy_url", lambda evil: evil.gateway_url),
    Swap("e2b-sandbox_domain", "e2b", "e2b.sandbox_domain", lambda evil: evil.domain),
    Swap("docker-engine", "docker", "docker.engine", lambda evil: "missing"),
)


def stored_config(tenant_id: int, kind: str) -> str:
    """A config holding SECRET (API key and an env value) at its stored addresses."""
    raw: dict[str, Any] = {"sandbox_type": kind, "allow_private_endpoints": True,
                           "env_vars": {"SWEEP_TOKEN": SECRET}}
    if kind == "e2b":
        raw["e2b"] = {"api_key": SECRET, "template_id": "base", "api_url": STORED_API}
    else:
        raw["docker"] = {"image": "sandlot/sandbox:base", "engine": "local"}
    doc = sandbox_doc.validate(raw, resolve_urls=False)
    row = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant_id, name=f"swap {kind}",
                        description="", sandbox_type=kind, config=doc)
    db.session.add(row)
    db.session.commit()
    return row.id


def swapped_doc(swap: Swap, address: str, mask: str) -> dict[str, Any]:
    """The API document: the stored one, one address swapped, every secret masked."""
    block_name, field = swap.field.split(".")
    if swap.kind == "e2b":
        block = {"api_key": mask, "template_id": "base", "api_url": STORED_API}
    else:
        block = {"image": "sandlot/sandbox:base", "engine": "local"}
    block[field] = address
    return {"sandbox_type": swap.kind, "allow_private_endpoints": True,
            "env_vars": {"SWEEP_TOKEN": mask}, block_name: block}


def swapped_form(swap: Swap, address: str, mask: str, config_id: str) -> dict[str, str]:
    """The editor form as the browser posts it, with the same swap."""
    doc = swapped_doc(swap, address, mask)
    form = {"config_id": config_id, "name": f"swap {swap.kind}", "description": "",
            "sandbox_type": swap.kind, "allow_private_endpoints": "y",
            "env_vars[0].key": "SWEEP_TOKEN", "env_vars[0].value": mask}
    form.update({f"{swap.kind}.{k}": str(v) for k, v in doc[swap.kind].items()})
    return form


@dataclass(frozen=True)
class SecretRoute:
    endpoint: str
    # (config id, swap, address, mask) -> (path, json body or None, form data or None)
    request: Callable[[str, Swap, str, str], tuple[str, Any, Any]]
    # A refusal as this route answers it: (status, text that names the refused secret)
    refusal_status: int


def _api(path: str, with_name: bool = False):
    def build(config_id: str, swap: Swap, address: str, mask: str):
        body: dict[str, Any] = {"config": swapped_doc(swap, address, mask)}
        if with_name:
            body["name"] = "swapped"
            return path.format(config_id=config_id), body, None
        body["config_id"] = config_id
        return path, body, None
    return build


def _web(path: str):
    def build(config_id: str, swap: Swap, address: str, mask: str):
        return path.format(config_id=config_id), None, swapped_form(swap, address, mask,
                                                                     config_id)
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
)
# Routes that read a config document but send nothing anywhere (they only render or
# validate with URLs unresolved), and creation, which has no stored secret to keep.
SENDS_NOTHING = {"web.sandbox_form_backend", "web.sandbox_form_validate",
                 "web.create_sandbox", "api.create_sandbox_config"}


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
