"""E2B/Cube template catalog and provisioning (reference 3.1.7 and 5.4).

`query` answers `POST /sandbox-configs/templates/query`: the catalog of a stored or unsaved
config, every field of 3.1.7 per template, and which template is the standard and which
the desktop one. With `ensure_*` it starts a build of a role's template when it is absent;
with `replace_*` it rebuilds it and, once ready, writes the new id onto every config of
the same tenant and backend identity (with the matching desktop mode), then deletes the
superseded templates of that role.

No request waits on a build: the work is a `provision_templates` job (polled by the
editor's fragment, or through GET /jobs/:id). Calls are single-flighted per tenant and
backend identity: while a job for that identity is pending or running, a second call
joins it (the same job comes back) instead of starting another build.

Templates this console builds are named `sandlot-standard-<hex>` / `sandlot-desktop-<hex>`:
a fresh name per build gives a replace a new template id (a build under an existing name
would reuse the old id, which the replace is about to delete). Only templates with these
prefixes are ever deleted; an account's own templates are never touched.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from flask import current_app
from sqlalchemy import or_, select, update

from app.backends.base import Backend, BackendError, TemplateBuild, TemplateInfo
from app.errors import AppError, Conflict, Unavailable, ValidationFailed
from app.extensions import db
from app.models import InstalledSkill, InstallStatus, Job, JobStatus, SandboxConfig, Tenant
from app.models.sandbox_config import CORDON_LEASE
from app.models.types import utcnow
from app.services import jobs
from app.services.sandboxes import document as sandbox_doc
from app.services.sandboxes import endpoints, incidents
from app.services.sandboxes import image as skill_image
from app.services.sandboxes.check.job import seal, unseal
from app.services.sandboxes.provider import backend_for
from app.tenancy import owned_or_404

log = logging.getLogger("sandlot.sandbox_templates")

JOB_KIND = "provision_templates"
TARGET = "template_identity"
ROLES = ("standard", "desktop")
PREFIX = {"standard": "sandlot-standard", "desktop": "sandlot-desktop"}
IMAGE_SETTING = {"standard": "SANDBOX_TEMPLATE_STANDARD_IMAGE",
                 "desktop": "SANDBOX_TEMPLATE_DESKTOP_IMAGE"}
USABLE = ("ready", "building")
ERROR_MAX = 300

Report = Callable[[int, str], None]


# -- the document and the catalog ---------------------------------------------------------

def resolve(stored: SandboxConfig | None, raw: Any, may_reuse: bool) -> dict[str, Any]:
    """The config to query: `raw` over the stored one (stored secrets only as
    sandbox_doc.merge allows: unchanged endpoints, a caller who may update), validated
    without requiring a template (the catalog is how one is found)."""
    if raw is None and stored is None:
        raise ValidationFailed.one("config", "send config or config_id")
    if raw is None:
        return stored.config
    merged = sandbox_doc.merge(raw, stored.config, may_reuse=may_reuse) if stored else raw
    return sandbox_doc.validate(_connection_only(merged), require_template=False)


def _connection_only(doc: Any) -> Any:
    """The catalog and builds depend on the connection only: a problem in the network
    policy or the environment must not stop an admin from finding a template. Stripped
    after the merge, so a stored secret is still refused to a swapped address."""
    if not isinstance(doc, dict):
        return doc
    return {k: v for k, v in doc.items() if k not in ("network", "env_vars")}


def catalog(backend: Backend, doc: dict[str, Any]) -> list[TemplateInfo]:
    """The templates a config of `doc` may use: for Docker, the engine's images the
    operator offers (never another config's skill snapshots)."""
    try:
        listed = backend.list_templates()
        if doc["sandbox_type"] == "docker":
            return [t for t in listed if not endpoints.image_problem(t.id)]
        return listed
    except BackendError as exc:
        # Tenant-safe wording: no address, port or path of a failed connection.
        raise Unavailable("The template catalog could not be read: "
                          f"{incidents.human(doc, exc)}") from exc


def status_at_provider(doc: dict[str, Any], template_id: str, timeout_sec: int
                       ) -> tuple[TemplateInfo | None, str]:
    """The template as the provider lists it now, and its status ("missing" if absent,
    "unknown" if the provider could not say), from one catalog read of at most
    `timeout_sec` per request. `doc` is the caller's copy: its timeout is lowered."""
    block = doc[doc["sandbox_type"]]
    block["http_timeout_sec"] = min(int(block.get("http_timeout_sec") or 30), timeout_sec)
    found, status, backend = None, "unknown", None
    try:
        backend = backend_for(doc)
        found = find(backend.list_templates(), template_id)
        status = found.status if found is not None else "missing"
    except (BackendError, AppError):
        status = "unknown"
    finally:
        if backend is not None:
            backend.close()
    return found, status


def role_id(doc: dict[str, Any], templates: list[TemplateInfo], role: str) -> str:
    """The role's template: the config's own when its desktop mode is that role and it is
    usable, else the newest usable template this console built for the role, else the
    config's own (missing or broken) one, else ""."""
    own = sandbox_doc.template_of(doc)
    if own and (role == "desktop") == bool(doc.get("desktop_enabled")):
        found = find(templates, own)
        if found is not None and found.status in USABLE:
            return own
    built = [t for t in templates if t.name.startswith(PREFIX[role]) and t.status in USABLE]
    built.sort(key=lambda t: (t.created_at or "", t.id), reverse=True)
    if built:
        return built[0].id
    return own if (role == "desktop") == bool(doc.get("desktop_enabled")) else ""


def find(templates: list[TemplateInfo], ref: str) -> TemplateInfo | None:
    return next((t for t in templates if ref and ref in (t.id, t.name)), None)


def present(doc: dict[str, Any], templates: list[TemplateInfo], role: str) -> bool:
    """Whether the role's template exists and is or will be ready (an untagged or failed
    build never will: it counts as absent)."""
    found = find(templates, role_id(doc, templates, role))
    return found is not None and found.status in USABLE


def describe(doc: dict[str, Any], templates: list[TemplateInfo],
             provisioned: bool = False) -> dict[str, Any]:
    """The 3.1.7 response `data`."""
    ids = {role: role_id(doc, templates, role) for role in ROLES}
    rows = []
    for t in templates:
        rows.append({
            "id": t.id, "name": t.name, "status": t.status, "version": t.version,
            "image": t.image, "created_at": t.created_at, "updated_at": t.updated_at,
            "standard": bool(ids["standard"]) and ids["standard"] in (t.id, t.name),
            "desktop": bool(ids["desktop"]) and ids["desktop"] in (t.id, t.name),
            "error": t.error or explain(t), "instance_type": t.instance_type,
            "network_type": t.network_type, "allow_internet_access": t.allow_internet_access,
        })
    return {"templates": rows, "standard_template_id": ids["standard"],
            "desktop_template_id": ids["desktop"], "provisioned": provisioned}


def explain(template: TemplateInfo) -> str:
    """What a template's status means for whoever picks it (reference 5.4)."""
    if template.status == "untagged":
        return ("built without the `default` tag, so it will never become ready: rebuild "
                "it")
    if template.status == "building":
        return "still building: sandboxes can boot from it once it is ready"
    return ""


# -- the query ---------------------------------------------------------------------------

def query(tenant_id: int, actor_id: int | None, stored: SandboxConfig | None, raw: Any,
          options: dict[str, Any], may_reuse: bool = True) -> tuple[dict[str, Any], Job | None]:
    """Reference 3.1.7. Returns the response data and, when a build was started or joined,
    its job (the caller answers 202)."""
    replace = [r for r in ROLES if options.get(f"replace_{r}")]
    ensure = [r for r in ROLES if options.get(f"ensure_{r}") and r not in replace]
    if replace and stored is None:
        raise ValidationFailed.one("config_id", "replace_* needs config_id")
    doc = resolve(stored, raw, may_reuse)
    if (replace or ensure) and doc["sandbox_type"] == "docker":
        # Docker images are built on the host (scripts/sandbox-image.sh).
        raise ValidationFailed.one("ensure_standard", "Docker has no template catalog to "
                                   "provision; build the image on the engine")
    if replace and sandbox_doc.identity(doc) != sandbox_doc.identity(stored.config):
        raise ValidationFailed.one("config", "save the connection settings before "
                                   "rebuilding templates")
    backend = backend_for(doc)
    try:
        templates = catalog(backend, doc)
    finally:
        backend.close()
    if replace:
        check_blocks(tenant_id, doc)
    data = describe(doc, templates)
    owner = skill_image.fingerprint(doc)
    running = in_flight(tenant_id, owner) if replace or ensure else None
    if running is not None:  # single flight: join the build under way
        db.session.rollback()
        return data, running
    work = [{"role": r, "replace": True} for r in replace] + [
        {"role": r, "replace": False} for r in ensure if not present(doc, templates, r)]
    if not work:
        db.session.rollback()
        return data, None
    job = start(tenant_id, actor_id, stored, raw, work, may_reuse, owner)
    return data, job


def check_blocks(tenant_id: int, doc: dict[str, Any]) -> None:
    """409 `skill_snapshot_blocks_template` while any config of this identity serves a
    skill snapshot or has a skill install or removal in flight: its image was baked from
    the template a replace would delete."""
    owner = skill_image.fingerprint(doc)
    for row in same_identity(tenant_id, owner):
        snapshot = (row.config.get("skill_image") or {}).get("snapshot_id")
        busy = db.session.scalar(select(InstalledSkill.id).where(
            InstalledSkill.sandbox_config_id == row.id, InstalledSkill.deleted_at.is_(None),
            InstalledSkill.status.in_([InstallStatus.installing, InstallStatus.removing]))
            .limit(1))
        if snapshot or busy is not None:
            raise Conflict(f"Config {row.name!r} has installed skills baked into an image "
                           "built from this template; uninstall them (or wait for the "
                           "install to end) before rebuilding the template.",
                           code="skill_snapshot_blocks_template", data={"config_id": row.id})


def same_identity(tenant_id: int, owner: str) -> list[SandboxConfig]:
    rows = db.session.scalars(select(SandboxConfig).where(
        SandboxConfig.tenant_id == tenant_id, SandboxConfig.deleted_at.is_(None),
        SandboxConfig.sandbox_type.in_(["e2b", "cube"])))
    return [r for r in rows if skill_image.fingerprint(r.config) == owner]


def start(tenant_id: int, actor_id: int | None, stored: SandboxConfig | None, raw: Any,
          work: list[dict[str, Any]], may_reuse: bool, owner: str) -> Job:
    """Enqueue the build, or join the one in flight for this tenant and identity.

    The tenant row is written first (a no-op update) so that the look-up and the insert
    hold its write lock together, on PostgreSQL and SQLite alike: two calls at once cannot
    both find nothing and both start a build."""
    db.session.execute(update(Tenant).where(Tenant.id == tenant_id).values(id=Tenant.id))
    running = in_flight(tenant_id, owner)
    if running is not None:
        db.session.rollback()
        return running
    params = {"config_id": stored.id if stored is not None else None,
              "sealed_config": seal(raw) if raw is not None else None,
              "may_reuse": bool(may_reuse), "work": work}
    return jobs.enqueue(JOB_KIND, tenant_id=tenant_id, actor_id=actor_id, target_type=TARGET,
                        target_id=owner, params=params)


def in_flight(tenant_id: int, owner: str) -> Job | None:
    """The pending or running build of this tenant and identity, if any."""
    return db.session.scalar(select(Job).where(
        Job.tenant_id == tenant_id, Job.kind == JOB_KIND, Job.target_type == TARGET,
        Job.target_id == owner, Job.status.in_([JobStatus.pending, JobStatus.running]))
        .order_by(Job.created_at).limit(1))


# -- the job -----------------------------------------------------------------------------

class BuildFailed(Exception):
    """A definite, explainable end of the job (the job kind turns it into `failed`)."""


def run_job(tenant_id: int, params: dict[str, Any], report: Report) -> dict[str, Any]:
    """What the `provision_templates` job does: each role's build, in order."""
    stored = None
    if params.get("config_id"):
        stored = owned_or_404(SandboxConfig, params["config_id"], tenant_id,
                              "The sandbox config was deleted before the build ran.")
    sealed = params.get("sealed_config")
    doc = resolve(stored, unseal(sealed) if sealed else None,
                  bool(params.get("may_reuse", False)))
    db.session.rollback()  # hold no transaction through the build
    backend = backend_for(doc)
    built: dict[str, str] = {}
    switched = 0
    try:
        work = list(params.get("work") or [])
        for index, item in enumerate(work):
            span = (index * 100 // len(work), (index + 1) * 100 // len(work))
            new_id = _provision(backend, tenant_id, doc, item["role"], bool(item["replace"]),
                                report, span)
            if new_id:
                built[item["role"]] = new_id
                if item["replace"]:
                    switched += _switch(backend, tenant_id, doc, item["role"], new_id, report)
        templates = catalog(backend, doc)
    finally:
        backend.close()
    result = describe(doc, templates, provisioned=bool(built))
    result.update(built=built, switched_configs=switched)
    return result


def _provision(backend: Backend, tenant_id: int, doc: dict[str, Any], role: str,
               replace: bool, report: Report, span: tuple[int, int]) -> str:
    """Build the role's template (unless an ensure finds it present); its id once ready."""
    if replace:
        _check_blocks_now(tenant_id, doc)
    elif present(doc, catalog(backend, doc), role):
        report(span[1], f"{role} template already present")
        return ""
    name = f"{PREFIX[role]}-{uuid.uuid4().hex[:8]}"
    image = current_app.config[IMAGE_SETTING[role]]
    try:
        build = backend.build_template(name, image)
    except BackendError as exc:
        raise BuildFailed(f"The {role} template build was not accepted: "
                          f"{incidents.human(doc, exc)}") from None
    report(span[0] + 2, f"building the {role} template {name} ({build.template_id})")
    build = _wait(backend, doc, build, role, report, span)
    report(span[1], f"{role} template {build.template_id} is ready")
    return build.template_id


def _wait(backend: Backend, doc: dict[str, Any], build: TemplateBuild, role: str,
          report: Report, span: tuple[int, int]) -> TemplateBuild:
    poll = float(current_app.config["SANDBOX_TEMPLATE_POLL_SECONDS"])
    started = time.monotonic()
    while True:
        try:
            build = backend.build_status(build.template_id, build.build_id)
        except BackendError as exc:
            raise BuildFailed(f"The {role} template build could not be followed: "
                              f"{incidents.human(doc, exc)}") from None
        if build.status == "ready":
            return build
        if build.status == "failed":
            reason = _scrub(doc, build.error or "the provider gave no reason")[:ERROR_MAX]
            raise BuildFailed(f"The {role} template build failed: {reason}")
        # Progress creeps towards the end of this role's span; a build has no percentage.
        elapsed = time.monotonic() - started
        creep = span[0] + int((span[1] - span[0] - 5) * elapsed / (elapsed + 60))
        report(max(span[0] + 2, creep), f"building the {role} template ({int(elapsed)} s)")
        time.sleep(poll)


def _scrub(doc: dict[str, Any], text: str) -> str:
    """A provider's own words may echo what it was sent: never the key."""
    key = str((doc.get(doc["sandbox_type"]) or {}).get("api_key") or "")
    return text.replace(key, "***") if len(key) >= 4 else text


def _check_blocks_now(tenant_id: int, doc: dict[str, Any]) -> None:
    try:
        check_blocks(tenant_id, doc)
    except Conflict as exc:
        raise BuildFailed(exc.message) from None
    finally:
        db.session.rollback()


def _switch(backend: Backend, tenant_id: int, doc: dict[str, Any], role: str, new_id: str,
            report: Report) -> int:
    """Point every same-identity config of the role at `new_id`, then delete the role's
    superseded templates. Checked again first: an install may have started meanwhile, and
    then the fresh template goes instead of the old one."""
    try:
        _check_blocks_now(tenant_id, doc)
    except BuildFailed:
        _delete(backend, new_id)
        raise
    owner = skill_image.fingerprint(doc)
    lease_start = utcnow() - CORDON_LEASE
    rows = db.session.scalars(select(SandboxConfig).where(
        SandboxConfig.tenant_id == tenant_id, SandboxConfig.deleted_at.is_(None),
        SandboxConfig.sandbox_type == doc["sandbox_type"],
        or_(SandboxConfig.cordoned_at.is_(None), SandboxConfig.cordoned_at < lease_start))
        .with_for_update().execution_options(populate_existing=True))
    count = 0
    for row in rows:
        config = dict(row.config)
        if skill_image.fingerprint(config) != owner:
            continue
        if bool(config.get("desktop_enabled")) != (role == "desktop"):
            continue
        kind = config["sandbox_type"]
        config[kind] = {**config[kind], "template_id": new_id}
        row.config, row.updated_at = config, utcnow()
        count += 1
    db.session.commit()
    report(-1, f"{count} config(s) now boot from {new_id}")
    for template in catalog(backend, doc):
        if template.name.startswith(PREFIX[role]) and template.id != new_id:
            _delete(backend, template.id)
            report(-1, f"deleted the superseded template {template.id}")
    return count


def _delete(backend: Backend, template_id: str) -> None:
    try:
        backend.delete_template(template_id)
    except BackendError as exc:
        log.warning("template %s not deleted: %s", template_id, exc.reason)
