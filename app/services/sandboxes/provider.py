"""The provider a sandbox config names: a backend client for it, and the `sandlot_*`
labels every sandbox carries (and every inventory filters on).

A leaf of the sandboxes domain: configs, checks, sessions and installs all reach the
provider through here, so none of them needs another's module for it.
"""

from __future__ import annotations

from typing import Any

from app.backends import registry
from app.backends.base import Backend, BackendError
from app.services.sandboxes import endpoints, nodes


def backend_for(doc: dict[str, Any], sandbox_id: str | None = None,
                traffic_token: str | None = None) -> Backend:
    """A backend client for a config, with what the operator decides filled in: the
    Docker engine's URL and TLS files, and whether private endpoints may be reached.
    Given a sandbox and its traffic token, the client is primed with them (Cube hands
    the token out once, at creation, and every later call needs it)."""
    kind = doc["sandbox_type"]
    settings = dict(doc.get(kind) or {})
    settings["allow_private_endpoints"] = endpoints.allow_private(doc)
    if kind == "docker":
        name = endpoints.engine_of(settings)
        engine = endpoints.engine(name)
        if engine is None:
            raise BackendError("This config's Docker engine is not offered by this deployment; "
                               "pick one of the operator's engines in the config.")
        settings.update(engine=engine.name, host=engine.url, tls_cert_path=engine.tls_dir)
        if not endpoints.owns(engine.name):  # another host's: through its node
            return nodes.remote_backend(engine.name, settings)
    backend = registry.make_backend(kind, settings)
    remember = getattr(backend, "remember_traffic_token", None)
    if remember is not None and sandbox_id and traffic_token:
        remember(sandbox_id, traffic_token)
    return backend


def labels(tenant_id: int | str, *, config_id: str | None = None,
           session_id: str | None = None, purpose: str | None = None,
           provider: str | None = None, binding_version: int | str | None = None,
           check_id: str | None = None, pool_id: str | None = None) -> dict[str, str]:
    """The `sandlot_*` labels of a sandbox, or a filter over them: the tenant and only
    the other labels given, every value a string (what providers store)."""
    given = {"sandlot_tenant_id": tenant_id, "sandlot_session_id": session_id,
             "sandlot_binding_version": binding_version, "sandlot_provider": provider,
             "sandlot_sandbox_config_id": config_id, "sandlot_purpose": purpose,
             "sandlot_check_id": check_id, "sandlot_pool_id": pool_id}
    return {key: str(value) for key, value in given.items() if value is not None}


def sandbox_filter(tenant_id: int, config_id: str) -> dict[str, str]:
    """Every sandbox of one config, whatever made it."""
    return labels(tenant_id, config_id=config_id)
