"""Skills: the workspace's skill catalog (reference 10.2). Cards with their installations,
the Add drawer (a source or a ZIP upload, optionally installed right away), the Install
drawer (the fan-out of reference 6.6), the file browser (6.5) and delete.

Everything goes through `app.services.skills.catalog`; this module only reads the request and
renders. The upload route streams the body itself (`skills_form.submission`), so it checks the
CSRF token itself too: the header htmx sends is checked before a byte of the body is read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from flask import flash, redirect, render_template, request, url_for
from werkzeug.datastructures import MultiDict

from app.auth.guards import guard
from app.errors import AppError
from app.extensions import csrf, db, htmx
from app.models import InstalledSkill, Role, SandboxConfig, SkillCatalogEntry
from app.services.skills import catalog as service
from app.services.skills.installs import stream
from app.tenancy import current_tenant, get_or_404, principal, scoped
from app.web import bp
from app.web._helpers import confirm_page, notice
from app.web.skills.form import Problems, Targets, submission
from app.web.skills.status import BUSY, LABELS, row_status, status_view

SOURCE_EXAMPLES = [
    ("@owner/slug", "ClawHub; add @1.2.0 for a version"),
    ("https://github.com/owner/repo/tree/main/skills/name", "GitHub or GitLab, a folder or a repo"),
    ("skills-sh:owner/repo/slug", "or https://skills.sh/owner/repo/slug"),
    ("https://example.com/skill.zip", "an archive (.zip, .tar.gz, .tgz, .tar) or a SKILL.md"),
]


# -- the catalog -------------------------------------------------------------------------

def _views(tenant) -> list[dict[str, Any]]:
    """The catalog as the service lists it; an install with no live definition is shown as
    a synthesised entry (its id is the install's), which has no bundle to act on."""
    views = service.list_catalog(tenant)
    for view in views:
        view["in_catalog"] = view["id"] not in {i["skill_id"] for i in view["installations"]}
        view["installations"].sort(key=lambda i: i["sandbox_config_name"].lower())
        view["failures"] = [i for i in view["installations"]
                            if i["status"] == "failed" and i["error"]]
        for install in view["installations"]:
            live = None
            if install["status"] in BUSY:  # the chip's percent and stage (reference 7.3)
                live = stream.current(tenant.id, db.session.get(InstalledSkill,
                                                                install["skill_id"]))
            install["s"] = status_view(install, live)
    return views


def _category() -> str:
    """The category filter: from the query string of the list itself, or, for the list an
    htmx request elsewhere re-renders (a mutation, a drawer, the install poll), the page's."""
    value = request.args.get("category", "")
    if htmx and request.endpoint != "web.skills" and htmx.current_url:
        value = parse_qs(urlsplit(htmx.current_url).query).get("category", [""])[0]
    return value.strip()[:64]


def _list_context(follow: bool = False) -> dict[str, Any]:
    """The list; `follow`: its poller runs for the open Manage drawer even when nothing
    the list shows is in flight (its chip may be under another category)."""
    tenant, category = current_tenant(), _category()
    views = _views(tenant)
    counts = Counter(name for view in views for name in view["categories"])
    tabs = [("", "All", len(views))] + [(name, name, counts[name])
                                        for name in sorted(counts, key=str.lower)]
    cards = [v for v in views if not category or category in v["categories"]]
    watch = [i["skill_id"] for v in cards for i in v["installations"] if i["status"] in BUSY]
    return {"tenant": tenant, "category": category, "tabs": tabs, "total": len(views),
            "cards": cards, "watch": watch, "follow": follow}


def _page(drawer: str, status: int = 200, headers: dict | None = None, **context):
    """A drawer: the fragment for htmx, else the catalog page with the drawer open."""
    if htmx:
        return render_template(drawer, **context), status, headers or {}
    return render_template("skills/index.html", drawer=drawer,
                           **{**_list_context(), **context}), status


@bp.get("/skills")
@guard(Role.viewer)
def skills():
    template = "skills/_list.html" if htmx else "skills/index.html"
    return render_template(template, drawer=None, **_list_context())


def _listed(message: str):
    """After a mutation that ends in the list: the fresh list, the drawer closed, a notice."""
    if not htmx:
        flash(message, "success")
        return redirect(url_for("web.skills"))
    context = _list_context()
    body = render_template("skills/_list.html", **context)
    body += '<div id="drawer-slot" hx-swap-oob="true"></div>'
    return notice(body, message), 200, {
        "HX-Retarget": "#skill-list", "HX-Reswap": "outerHTML",
        "HX-Replace-Url": url_for("web.skills", category=context["category"] or None)}


def _entry(catalog_id) -> SkillCatalogEntry:
    return get_or_404(SkillCatalogEntry, str(catalog_id), "skill")


# -- add: register from a source or an upload, then optionally install ---------------------

@bp.get("/skills/new")
@guard(Role.admin)
def new_skill():
    return _page("skills/_add.html", targets=Targets.read(MultiDict()), source="",
                 problems=Problems(), limit_mb=service.limit_mb(), examples=SOURCE_EXAMPLES)


@bp.post("/skills")
@guard(Role.admin)
def add_skill():
    source, targets, problems = "", None, Problems()
    try:
        with submission() as (fields, upload):
            source = (fields.get("source") or "").strip()
            targets = Targets.read(fields)
            entry, created = _register(source, upload, problems)
    except AppError as err:  # the body itself was refused (too large, unreadable)
        db.session.rollback()
        problems.place(err, "file")
        entry = None
    if entry is None:
        return _add_refused(source, targets or Targets.read(MultiDict()), problems)
    verb = "Added" if created else "Updated"
    message = f"{verb} {_named(entry)}{' ' + entry.version if entry.version else ''}."
    if not targets.picked:
        return _listed(message)
    return _fanned_out(entry, targets, message)


def _register(source: str, upload: IO[bytes] | None,
              problems: Problems) -> tuple[SkillCatalogEntry | None, bool]:
    if source and upload is not None:
        problems.alert = "Give a source or a ZIP file, not both."
    elif not source and upload is None:
        problems.add("source", "Enter a source, or choose a ZIP file below.")
    elif "\0" in source:
        problems.add("source", "Remove the NUL character.")
    if problems:
        return None, False
    known = set(db.session.scalars(scoped(SkillCatalogEntry).with_only_columns(
        SkillCatalogEntry.id)))
    tenant, who = current_tenant(), principal()
    try:
        entry = (service.register_upload(tenant, who, upload) if upload is not None
                 else service.register_source(tenant, who, source))
    except AppError as err:
        db.session.rollback()
        problems.place(err, "file" if upload is not None else "source")
        return None, False
    return entry, entry.id not in known


def _add_refused(source: str, targets: Targets, problems: Problems):
    """The form again with its errors (the file must be chosen again: browsers never
    refill a file input); the drawer around it stays, so nothing slides in twice."""
    status = problems.status
    context = {"targets": targets, "source": source, "problems": problems,
               "limit_mb": service.limit_mb(), "examples": SOURCE_EXAMPLES}
    if htmx:
        return render_template("skills/_add_form.html", **context), status
    return _page("skills/_add.html", status, **context)


# The upload route checks CSRF itself (above), before or after streaming the body.
csrf.exempt("app.web.skills.catalog.add_skill")


# -- install (reference 6.6) -----------------------------------------------------------------

@bp.get("/skills/<uuid:catalog_id>/install")
@guard(Role.admin)
def install_skill_form(catalog_id):
    entry = _entry(catalog_id)
    return _install_form(entry, Targets.read(MultiDict()), Problems())


@bp.post("/skills/<uuid:catalog_id>/install")
@guard(Role.admin)
def install_skill(catalog_id):
    entry = _entry(catalog_id)
    targets = Targets.read(request.form)
    problems = Problems()
    if not targets.picked:
        problems.add("sandbox_config_ids", "Pick at least one sandbox config.")
        return _install_form(entry, targets, problems, 400)
    try:
        installs, errors = service.install(current_tenant(), principal(), entry, targets.picked)
    except AppError as err:  # every target failed: the first error, as the API answers it
        db.session.rollback()
        problems.place(err, "sandbox_config_ids")
        return _install_form(entry, targets, problems, err.status)
    return _result(entry, targets, installs, errors, None)


def _install_form(entry: SkillCatalogEntry, targets: Targets, problems: Problems,
                  status: int = 200):
    installed = {i["sandbox_config_id"]: i for view in _views(current_tenant())
                 if view["id"] == entry.id for i in view["installations"]}
    context = {"entry": entry, "targets": targets, "problems": problems,
               "installed": installed, "labels": LABELS}
    if htmx and request.method == "POST":
        return render_template("skills/_install_form.html", **context), status
    return _page("skills/_install.html", status, **context)


def _fanned_out(entry: SkillCatalogEntry, targets: Targets, message: str):
    """Right after registering: install onto the picked targets and show how it went."""
    try:
        installs, errors = service.install(current_tenant(), principal(), entry, targets.picked)
        failed = None
    except AppError as err:
        db.session.rollback()
        installs, errors, failed = {}, {}, err.message
    return _result(entry, targets, installs, errors, failed, message)


def _result(entry: SkillCatalogEntry, targets: Targets, installs: dict[str, str],
            errors: dict[str, str], failed: str | None, registered: str | None = None):
    """The fan-out's outcome in the drawer, with the list refreshed behind it. Only a
    registration is flashed: the panel itself says how each install went."""
    rows = [{"config_id": c, "name": targets.name(c)[0], "kind": targets.name(c)[1],
             "skill_id": installs.get(c), "error": errors.get(c)}
            for c in dict.fromkeys(targets.picked)]
    for r in rows:  # an accepted install's live status, as its chip shows it
        row = db.session.get(InstalledSkill, r["skill_id"]) if r["skill_id"] else None
        if row is not None:
            r["s"] = row_status(row, db.session.get(SandboxConfig, row.sandbox_config_id))
    context = {"entry": entry, "rows": rows, "failed": failed, "registered": registered}
    if not htmx:
        accepted = f"{len(installs)} of {len(rows)} installs accepted."
        flash(f"{registered or ''} {accepted}".strip(), "success" if installs else "error")
        return redirect(url_for("web.skills"))
    body = render_template("skills/_result.html", **context)
    body += render_template("skills/_list.html", oob=True, **_list_context())
    if registered:
        body = notice(body, registered)
    return body, 200, {"HX-Retarget": "#drawer-slot", "HX-Reswap": "innerHTML"}


# -- delete ----------------------------------------------------------------------------------

@bp.get("/skills/<uuid:catalog_id>/delete")
@guard(Role.admin)
def confirm_delete_skill(catalog_id):
    """Without JavaScript the Delete button lands here and asks first."""
    entry = _entry(catalog_id)
    return confirm_page(f"Delete {_named(entry)} from the catalog?", "Delete",
                        url_for("web.delete_skill", catalog_id=entry.id),
                        url_for("web.skills"), "Its bundle is deleted too.")


@bp.post("/skills/<uuid:catalog_id>/delete")
@guard(Role.admin)
def delete_skill(catalog_id):
    entry = _entry(catalog_id)
    name = _named(entry)
    service.delete_entry(current_tenant(), principal(), entry)  # 409 while installed anywhere
    return _listed(f"Deleted {name} from the catalog.")


def _named(entry: SkillCatalogEntry) -> str:
    """“Display name” (slug) when they differ, else “slug”: what a message calls a skill."""
    shown = entry.display_name or entry.name
    return f"“{shown}”" + (f" ({entry.name})" if shown != entry.name else "")


# -- files (reference 6.5) ---------------------------------------------------------------

@bp.app_template_filter("bytes")
def format_bytes(size: int) -> str:
    """518 B, 66.0 KiB, 6.0 MiB: binary units, as the size limits are stated."""
    if size < 1024:
        return f"{size} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


@dataclass
class Node:
    """A file or a folder of the bundle's tree."""

    name: str
    path: str
    size: int = 0
    children: dict[str, Node] | None = None

    @property
    def is_dir(self) -> bool:
        return self.children is not None

    def sorted(self) -> list[Node]:
        """Folders first, then files, each by name."""
        return sorted((self.children or {}).values(),
                      key=lambda n: (not n.is_dir, n.name.lower(), n.name))


def file_tree(files: list[dict[str, Any]]) -> Node:
    root = Node("", "", children={})
    for item in files:
        parts, node = item["path"].split("/"), root
        for depth, part in enumerate(parts[:-1]):
            node = node.children.setdefault(
                "d:" + part, Node(part, "/".join(parts[:depth + 1]), children={}))
        node.children["f:" + parts[-1]] = Node(parts[-1], item["path"], item["size"])
    return root


@bp.get("/skills/<uuid:catalog_id>/files")
@guard(Role.admin)
def skill_files(catalog_id):
    """The browser page; for htmx (a file picked in the tree) only the viewer."""
    entry = _entry(catalog_id)
    try:
        shown, problem = service.read_file(entry, request.args.get("path")), None
    except AppError as err:
        shown, problem = None, err
    status = problem.status if problem else 200
    context = {"entry": entry, "file": shown, "problem": problem,
               "asked": request.args.get("path") or "SKILL.md"}
    if htmx:
        return render_template("skills/_file.html", **context), status
    try:
        files, tree_problem = service.list_files(entry), None
    except AppError as err:
        files, tree_problem = [], err
    return render_template("skills/files.html", tree=file_tree(files), tree_count=len(files),
                           tree_problem=tree_problem, **context), status

