"""Template catalog and template builds on an E2B-compatible API (reference 3.1.7, 5.4).

Catalog: `GET /templates` (E2B and Cube spell names and status differently, so rows are
read leniently) plus the account's snapshots, which boot as templates too. A template
whose build is ready but that carries no `default` tag (`GET /templates/{id}/tags`) is
reported `untagged`: a sandbox create resolves a template through its `default` tag, so
such a template never becomes usable (reference 5.4).

Builds go through the SDK's own build API, the wire E2B's `Template.build` speaks:
`POST /v3/templates` (name and tags), `POST /v2/templates/{id}/builds/{build}` (the base
image), then `GET /templates/{id}/builds/{build}/status` until ready or error. Cube speaks
the E2B API and is driven the same way. Every call goes to the config's own control
plane with the config's own key (`self.api`), never elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from e2b.api.client.api.tags import get_templates_template_id_tags
from e2b.api.client.api.templates import delete_templates_template_id
from e2b.template_sync import build_api

from app.backends.base import BackendError, TemplateBuild, TemplateInfo

DEFAULT_TAG = "default"
LIST_PAGE = 100
MAX_PAGES = 50
# Tag look-ups per catalog read: one request each, so bounded.
MAX_TAG_CHECKS = 25
STATUS = {"uploaded": "ready", "success": "ready", "running": "building",
          "waiting": "building", "error": "failed"}


def iso(value: Any) -> str | None:
    """ISO 8601 in UTC, however the provider spelled it."""
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    return None


def read_template(row: Any) -> TemplateInfo | None:
    """One catalog row, read leniently: E2B and Cube spell names and status differently."""
    if not isinstance(row, dict) or not row.get("templateID"):
        return None
    names = [*(row.get("names") or ()), *(row.get("aliases") or ()), row.get("name")]
    name = next((str(n) for n in names if n), str(row["templateID"]))
    status = str(row.get("buildStatus") or row.get("status") or "ready").lower()
    status = STATUS.get(status, status)
    cpu, memory = row.get("cpuCount"), row.get("memoryMB")
    instance = row.get("instanceType") or (f"{cpu} vCPU, {memory} MB" if cpu and memory else "")
    internet = row.get("allowInternetAccess")
    return TemplateInfo(
        id=str(row["templateID"]), name=name, status=status,
        version=str(row.get("version") or row.get("buildID") or ""),
        image=str(row.get("imageInfo") or row.get("image") or ""),
        created_at=iso(row.get("createdAt")), updated_at=iso(row.get("updatedAt")),
        error=str(row.get("error") or row.get("errorMessage") or ""),
        instance_type=str(instance), network_type=str(row.get("networkType") or ""),
        allow_internet_access=internet if isinstance(internet, bool) else None)


class TemplateCatalog:
    """Mixed into E2BCompatible, which provides `api`, `sdk`, `_errors`, `_raise_for`."""

    provider: str
    api: Any
    sdk: Any
    _errors: Any
    _raise_for: Any

    def list_templates(self) -> list[TemplateInfo]:
        """The account's templates (untagged ones marked) and its snapshots."""
        with self._errors("list templates"):
            response = self.api.get_httpx_client().get("/templates")
        self._raise_for(response, "list templates")
        try:
            rows = response.json()
        except ValueError:
            raise BackendError(f"list templates: {self.provider} returned no JSON") from None
        found = {t.id: t for t in map(read_template, rows if isinstance(rows, list) else [])
                 if t}
        checked = 0
        for template in list(found.values()):
            if template.status == "ready" and checked < MAX_TAG_CHECKS:
                checked += 1
                if self.template_tags(template.id) == []:
                    found[template.id] = replace(template, status="untagged")
        with self._errors("list snapshots"):
            for snap in self._snapshots():
                name = snap.names[0] if snap.names else snap.snapshot_id
                found.setdefault(snap.snapshot_id, TemplateInfo(
                    id=snap.snapshot_id, name=name, status="ready"))
        return sorted(found.values(), key=lambda t: t.id)

    def _snapshots(self) -> Iterator[Any]:
        """The account's snapshots, page by page, at most MAX_PAGES pages of LIST_PAGE
        (the caller holds `_errors`)."""
        pages = self.sdk.Sandbox.list_snapshots(limit=LIST_PAGE)
        for _ in range(MAX_PAGES):
            if not pages.has_next:
                break
            yield from pages.next_items()

    def template_tags(self, template_id: str) -> list[str] | None:
        """The tags of a template's builds, filtered to `default`: [] when it has none,
        None when the provider cannot say (no tags API)."""
        with self._errors("list template tags"):
            response = get_templates_template_id_tags.sync_detailed(
                template_id=template_id, client=self.api)
        if response.status_code in (404, 405, 501):
            return None
        self._raise_for(response, "list template tags")
        tags = [str(getattr(t, "tag", "")) for t in (response.parsed or [])
                if not isinstance(response.parsed, dict)]
        return [t for t in tags if t == DEFAULT_TAG]

    def build_template(self, name: str, image: str,
                       tags: tuple[str, ...] = (DEFAULT_TAG,)) -> TemplateBuild:
        """Start a build of template `name` from `image`; poll `build_status` after."""
        if not name or not image:
            raise BackendError("a template build needs a name and a base image")
        with self._errors("request template build"):
            accepted = build_api.request_build(self.api, name=name, tags=list(tags) or None,
                                               cpu_count=None, memory_mb=None,
                                               min_free_disk_mb=None)
            build_api.trigger_build(self.api, accepted.template_id, accepted.build_id,
                                    {"fromImage": image, "force": True})
        return TemplateBuild(template_id=accepted.template_id, build_id=accepted.build_id)

    def build_status(self, template_id: str, build_id: str) -> TemplateBuild:
        """Where a build stands: building, ready or failed (with the provider's reason)."""
        with self._errors("template build status"):
            status = build_api.get_build_status(self.api, template_id, build_id)
        state = STATUS.get(status.status.value, status.status.value)
        reason = status.reason.message if status.reason is not None else ""
        return TemplateBuild(template_id=template_id, build_id=build_id,
                             status=state if state in ("ready", "failed") else "building",
                             error=str(reason or ""))

    def delete_template(self, template_id: str) -> None:
        """Delete a template; not found is success."""
        with self._errors("delete template"):
            response = delete_templates_template_id.sync_detailed(
                template_id=template_id, client=self.api)
        if response.status_code == 404:
            return
        self._raise_for(response, "delete template")
