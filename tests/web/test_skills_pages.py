"""The Skills section: the catalog with its installation chips, the Add drawer (upload or
source, optional install), the Install drawer (fan-out), the file browser and delete."""

from __future__ import annotations

import io
import os
import re
import zipfile

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.models import InstalledSkill, InstallStatus, Job, JobStatus, SkillCatalogEntry
from app.services import audit
from app.services.sandboxes import configs
from app.services.skills import catalog as service
from tests.conftest import csrf_token
from tests.factories import config_doc
from tests.fakes import skill_registry
from tests.fakes.skill_archives import PNG, make_zip, skill_files, skill_md
from tests.web._support import htmx_headers, text

bundle_dir = skill_registry.bundle_dir  # fixtures
sites = skill_registry.sites
MiB = 1024 * 1024
SYSTEM = audit.SystemActor("tests")


class RecordingDispatcher:
    """Takes the place of the job dispatcher: these tests are about the pages' accept path,
    so the rows stay `installing` (tests/installs/ run the install job for real)."""

    def __init__(self):
        self.submitted: list[str] = []

    def submit(self, job_id: str, timeout: int, tenant_id: int | None = None) -> None:
        self.submitted.append(job_id)


@pytest.fixture
def dispatcher(app, monkeypatch):
    recorder = RecordingDispatcher()
    monkeypatch.setitem(app.extensions, "sandlot_dispatcher", recorder)
    return recorder


@pytest.fixture
def world(two_tenants, bundle_dir, dispatcher):
    return two_tenants


def docker(group, name: str):
    return configs.create_config(group.tenant, SYSTEM, name, "", config_doc("docker"))


def register(group, name: str = "demo-skill", version: str = "1.0.0", files=None,
             categories=()) -> SkillCatalogEntry:
    data = make_zip(files or skill_files(name, version))
    entry = service.register_upload(group.tenant, SYSTEM, io.BytesIO(data))
    if categories:
        service.set_categories(group.tenant, SYSTEM, entry, list(categories))
    return entry


def catalog_rows() -> int:
    return db.session.scalar(select(func.count()).select_from(SkillCatalogEntry))


def stored_nothing(directory) -> bool:
    blobs = skill_registry.stored_blobs(directory) if directory.exists() else []
    return catalog_rows() == 0 and blobs == []


def upload(client, data: bytes | None, *, source: str = "", targets=(), filename="skill.zip",
           htmx: bool = True, token: bool = True):
    """The Add form as the browser posts it: multipart, the CSRF token as htmx's header
    (or as the form field without htmx)."""
    form: dict = {"source": source, "sandbox_config_ids": list(targets)}
    form["file"] = (io.BytesIO(data or b""), filename if data is not None else "")
    headers = htmx_headers(client, "/skills") if htmx else {}
    if not token:
        headers.pop("X-CSRFToken", None)
    elif not htmx:
        form["csrf_token"] = csrf_token(client, "/skills")
    return client.post("/skills", data=form, headers=headers, content_type="multipart/form-data")


def slot(body: str, slot_id: str) -> str:
    match = re.search(rf'<p class="field-error" id="{re.escape(slot_id)}">(.*?)</p>', body, re.S)
    assert match, f"no error in {slot_id}"
    return match.group(1).strip()


def chips(body: str) -> list[tuple[str, str]]:
    """(config name, status) of every installation chip on the page."""
    found = re.findall(r'<li class="chip">.*?<span class="install-status status-(\w+)[^"]*"'
                       r'[^>]*>.*?<span class="status-name">(.*?)</span>', body, re.S)
    return [(name, status) for status, name in found]


# -- the catalog -------------------------------------------------------------------------------

def test_a_viewer_sees_cards_and_chips_but_no_admin_action(world, login_as):
    a, _ = world
    entry = register(a, "pdf-tools", "1.2.0", categories=["Documents"])
    config = docker(a, "Local Docker")
    service.install(a.tenant, SYSTEM, entry, [config.id])
    body = text(login_as(a.viewer, a.tenant).get("/skills"))
    assert "pdf-tools" in body and "v1.2.0" in body and "A demo skill" in body
    assert '<span class="badge badge-neutral">Documents</span>' in body
    assert chips(body) == [("Local Docker", "installing")]
    for action in ("Add skill", "/skills/new", f"/skills/{entry.id}/install",
                   f"/skills/{entry.id}/files", f"/skills/{entry.id}/delete"):
        assert action not in body


def test_an_admin_sees_add_install_files_and_delete(world, login_as):
    a, _ = world
    entry = register(a)
    body = text(login_as(a.admin, a.tenant).get("/skills"))
    for action in ("Add skill", "/skills/new", f"/skills/{entry.id}/install",
                   f"/skills/{entry.id}/files", f"/skills/{entry.id}/delete"):
        assert action in body
    assert 'hx-confirm="Delete “demo-skill” from the catalog?' in body
    assert "Not installed on any sandbox config yet." in body
    assert "disabled" not in body.split(entry.id, 1)[1][:3000]


def test_chips_show_every_status_with_its_colour(world, login_as, app, monkeypatch):
    # four installs at once (its fourth row used to be written only by the half-write
    # behind a refused quota: tests/test_route_sweep.py)
    monkeypatch.setitem(app.config, "QUOTA_CONCURRENT_INSTALLS_PER_WORKSPACE", 4)
    a, _ = world
    entry = register(a)
    rows = [docker(a, name) for name in ("Alpha", "Bravo", "Charlie", "Delta")]
    service.install(a.tenant, SYSTEM, entry, [r.id for r in rows])
    states = dict(zip(("Alpha", "Bravo", "Charlie", "Delta"),
                      (InstallStatus.installing, InstallStatus.ready, InstallStatus.failed,
                       InstallStatus.removing), strict=True))
    for skill in db.session.scalars(select(InstalledSkill)):
        config = next(r for r in rows if r.id == skill.sandbox_config_id)
        skill.status = states[config.name]
        skill.error = "pip could not reach pypi.org" if config.name == "Charlie" else None
    db.session.commit()
    body = text(login_as(a.viewer, a.tenant).get("/skills"))
    assert chips(body) == [("Alpha", "installing"), ("Bravo", "ready"), ("Charlie", "failed"),
                           ("Delta", "removing")]
    assert "<strong>Charlie:</strong> pip could not reach pypi.org" in body
    assert 'id="install-watch"' in body  # in flight: one poller follows them


def test_a_disabled_install_and_an_orphan_install_are_shown_for_what_they_are(world,
                                                                              login_as):
    """A disabled install's chip says so; an install whose definition left the catalog is a
    synthesised card with nothing to act on (it has no bundle of its own)."""
    a, _ = world
    kept, gone = register(a, "kept"), register(a, "gone")
    config = docker(a, "Alpha")
    service.install(a.tenant, SYSTEM, kept, [config.id])
    service.install(a.tenant, SYSTEM, gone, [config.id])
    for row in db.session.scalars(select(InstalledSkill)):
        row.status, row.enabled = InstallStatus.ready, row.name != "kept"
    gone.deleted_at = gone.updated_at
    db.session.commit()
    body = text(login_as(a.admin, a.tenant).get("/skills"))
    assert 'class="install-status status-ready is-off"' in body
    assert '<span class="status-off">Disabled</span>' in body
    assert "disabled, so agents are not offered it" in body
    orphan = body.split('aria-labelledby="skill-', 1)[1].split("</article>", 1)[0]
    # no Install button (it has no bundle of its own); its chip still opens the drawer
    assert "gone" in orphan and "Not in catalog" in orphan and "Install</a>" not in orphan
    assert "/files" not in orphan and "/delete" not in orphan


def test_a_settled_list_does_not_poll(world, login_as):
    a, _ = world
    entry = register(a)
    service.install(a.tenant, SYSTEM, entry, [docker(a, "Alpha").id])
    db.session.execute(InstalledSkill.__table__.update().values(status=InstallStatus.ready))
    db.session.commit()
    assert 'id="install-watch"' not in text(login_as(a.viewer, a.tenant).get("/skills"))


def test_categories_filter_the_cards(world, login_as):
    a, _ = world
    register(a, "pdf-tools", categories=["Documents"])
    register(a, "web-search", categories=["Research", "Web"])
    register(a, "plain")
    client = login_as(a.viewer, a.tenant)
    body = text(client.get("/skills"))
    counts = dict(re.findall(r'class="tab[^"]*"[^>]*>([\w ]+)<span class="count">(\d+)</span>',
                             body))
    assert counts == {"All": "3", "Documents": "1", "Research": "1", "Web": "1"}
    fragment = text(client.get("/skills?category=Research", headers={"HX-Request": "true"}))
    assert fragment.lstrip().startswith('<section id="skill-list"') and "<html" not in fragment
    assert "web-search" in fragment and "pdf-tools" not in fragment and "plain" not in fragment
    assert "No skills tagged “Nothing”" in text(client.get("/skills?category=Nothing"))


def test_the_install_poll_keeps_the_pages_category_and_follows_an_open_drawer(world,
                                                                              login_as):
    """Issue 27 item 1: the list the one poll re-renders at a verdict is the page's (its
    category tab), and an open Manage drawer is followed even when its chip is under
    another category."""
    a, _ = world
    docs = register(a, "pdf-tools", categories=["Documents"])
    register(a, "web-search", categories=["Web"])
    service.install(a.tenant, SYSTEM, docs, [docker(a, "Alpha").id])
    row = db.session.scalars(select(InstalledSkill)).one()
    client = login_as(a.admin, a.tenant)
    on_web = {"HX-Request": "true", "HX-Current-URL": "http://localhost/skills?category=Web"}
    drawer = text(client.get(f"/skills/installs/{row.id}", headers=on_web))
    assert "pdf-tools" not in drawer.split('id="skill-list"', 1)[1]  # filtered out
    assert 'id="install-watch" hidden hx-get="/skills/installs/live"' in drawer
    tick = text(client.get(f"/skills/installs/live?open={row.id}", headers=on_web))
    assert 'id="manage-live"' in tick and 'id="skill-list"' not in tick
    row.status = InstallStatus.ready
    db.session.commit()
    done = text(client.get(f"/skills/installs/live?open={row.id}", headers=on_web))
    listed = done.split('id="skill-list"', 1)[1].split("</section>", 1)[0]
    assert "web-search" in listed and "pdf-tools" not in listed
    assert 'id="install-watch"' not in done and 'hx-swap-oob="innerHTML"' in done


def test_an_empty_catalog_has_an_empty_state(world, login_as):
    a, _ = world
    assert "No skills yet" in text(login_as(a.viewer, a.tenant).get("/skills"))
    admin = text(login_as(a.admin, a.tenant).get("/skills"))
    assert "No skills yet" in admin and "Add skill" in admin


def test_the_nav_links_to_skills_for_every_role(world, login_as):
    a, _ = world
    for user in a.by_role.values():
        page = text(login_as(user, a.tenant).get("/skills"))
        assert re.search(r'<a class="nav-item is-active" href="/skills"\s+aria-current="page">',
                         page)


# -- add: upload --------------------------------------------------------------------------------

def test_an_uploaded_zip_becomes_a_card(world, login_as, bundle_dir):
    a, _ = world
    client = login_as(a.admin, a.tenant)
    drawer = text(client.get("/skills/new", headers={"HX-Request": "true"}))
    assert 'hx-encoding="multipart/form-data"' in drawer and "<progress" in drawer
    assert "@owner/slug" in drawer and "skills-sh:owner/repo/slug" in drawer
    # issue 27 item 10: the help asked for a version the upload never needs
    assert "a <code>version</code> such as 1.2.0 is optional" in drawer

    response = upload(client, make_zip(skill_files("csv-helper", "0.3.1")))
    assert response.status_code == 200, text(response)
    assert response.headers["HX-Retarget"] == "#skill-list"
    body = text(response)
    assert 'id="skill-list"' in body and "csv-helper" in body and "v0.3.1" in body
    assert "Added “csv-helper” 0.3.1." in body
    assert '<div id="drawer-slot" hx-swap-oob="true"></div>' in body
    entry = db.session.scalar(select(SkillCatalogEntry))
    assert (entry.name, entry.version, entry.description) == ("csv-helper", "0.3.1",
                                                               "A demo skill")
    assert len(skill_registry.stored_blobs(bundle_dir)) == 1
    assert "added skill “csv-helper” to the catalog" in text(client.get("/"))  # activity


def test_a_plain_form_post_uploads_too_and_redirects(world, login_as):
    a, _ = world
    client = login_as(a.admin, a.tenant)
    response = upload(client, make_zip(skill_files("no-js")), htmx=False)
    assert response.status_code == 302 and response.headers["Location"] == "/skills"
    assert "Added “no-js” 1.0.0." in text(client.get("/skills"))


def test_uploading_the_same_name_again_updates_the_card(world, login_as):
    a, _ = world
    register(a, "csv-helper", "0.3.1")
    client = login_as(a.admin, a.tenant)
    body = text(upload(client, make_zip(skill_files("csv-helper", "0.4.0"))))
    assert "Updated “csv-helper” 0.4.0." in body and "v0.4.0" in body
    assert catalog_rows() == 1


@pytest.mark.parametrize("files, message", [
    ({"README.md": b"# no skill here\n"}, "SKILL.md"),
    ({"SKILL.md": skill_md("sneaky"), "../evil.sh": b"rm -rf /\n"}, "invalid"),
])
def test_a_bad_bundle_is_shown_next_to_the_file_field_and_nothing_is_stored(
        world, login_as, bundle_dir, files, message):
    a, _ = world
    client = login_as(a.admin, a.tenant)
    response = upload(client, make_zip(files))
    assert response.status_code == 400
    body = text(response)
    assert body.lstrip().startswith('<form id="skill-form"')  # only the form: no re-slide
    error = slot(body, "skill-file-error")
    assert error.startswith("The skill bundle is invalid:") and message in error
    assert 'aria-invalid="true"' in body and "skill-source-error" not in body
    assert stored_nothing(bundle_dir)


def test_a_file_that_is_not_a_zip_is_refused(world, login_as, bundle_dir):
    a, _ = world
    response = upload(login_as(a.admin, a.tenant), b"just some text", filename="notes.txt")
    assert response.status_code == 400
    assert "upload a .zip archive" in slot(text(response), "skill-file-error")
    assert stored_nothing(bundle_dir)


def test_an_oversize_upload_is_refused_next_to_the_file_field(world, login_as, app,
                                                               monkeypatch, bundle_dir):
    monkeypatch.setitem(app.config, "MAX_SKILL_BUNDLE_SIZE_MB", 1)
    monkeypatch.setitem(app.config, "MAX_FILE_SIZE_MB", 1)
    a, _ = world
    data = make_zip({**skill_files("big"), "noise.bin": os.urandom(int(1.5 * MiB))},
                    compression=zipfile.ZIP_STORED)
    response = upload(login_as(a.admin, a.tenant), data)
    assert response.status_code == 413
    assert slot(text(response), "skill-file-error") == "skill bundle cannot exceed 1 MB"
    assert stored_nothing(bundle_dir)


def test_uploads_beyond_the_app_body_limit_are_accepted_on_this_route(world, login_as):
    a, _ = world
    data = make_zip({**skill_files("roomy"), "assets/blob.bin": os.urandom(2 * MiB)},
                    compression=zipfile.ZIP_STORED)
    assert len(data) > 2 * MiB  # the app's own limit is 1 MiB
    assert upload(login_as(a.admin, a.tenant), data).status_code == 200
    assert catalog_rows() == 1


def test_an_upload_without_a_csrf_token_is_refused_and_stores_nothing(world, login_as,
                                                                      bundle_dir):
    a, _ = world
    client = login_as(a.admin, a.tenant)
    for htmx in (True, False):
        response = upload(client, make_zip(skill_files()), htmx=htmx, token=False)
        assert response.status_code == 400
        assert "The form expired" in text(response)
    response = client.post("/skills", data={"source": "@acme/x"},
                           headers={"HX-Request": "true", "X-CSRFToken": "forged"})
    assert response.status_code == 400
    assert stored_nothing(bundle_dir)


# -- add: source, and neither/both ---------------------------------------------------------------

def test_a_bad_source_is_shown_next_to_the_source_field(world, login_as, bundle_dir):
    a, _ = world
    client = login_as(a.admin, a.tenant)
    response = upload(client, None, source="acme/pdf-tools")
    assert response.status_code == 400
    body = text(response)
    assert "is ambiguous" in slot(body, "skill-source-error")
    assert "use @acme/pdf-tools for ClawHub" in slot(body, "skill-source-error")
    assert 'value="acme/pdf-tools"' in body  # what was typed stays
    response = upload(client, None, source="ftp://example.test/skill.zip")
    assert response.status_code == 400 and slot(text(response), "skill-source-error")
    assert stored_nothing(bundle_dir)


def test_a_source_is_fetched_and_registered(world, login_as, sites):
    a, _ = world
    sites.other.add("/skills/md-skill.zip", make_zip(skill_files("md-skill", "2.0.0")))
    response = upload(login_as(a.admin, a.tenant), None,
                      source=f"{sites.other.url}/skills/md-skill.zip")
    assert response.status_code == 200, text(response)
    assert "Added “md-skill” 2.0.0." in text(response)


def test_neither_or_both_inputs_are_refused(world, login_as, bundle_dir):
    a, _ = world
    client = login_as(a.admin, a.tenant)
    response = upload(client, None)
    assert response.status_code == 400
    assert slot(text(response), "skill-source-error") == \
        "Enter a source, or choose a ZIP file below."
    response = upload(client, make_zip(skill_files()), source="@acme/pdf-tools")
    assert response.status_code == 400
    assert "Give a source or a ZIP file, not both." in text(response)
    assert stored_nothing(bundle_dir)


# -- install --------------------------------------------------------------------------------------

def test_add_with_targets_installs_and_shows_the_fan_out(world, login_as, dispatcher):
    a, _ = world
    one, two = docker(a, "Docker one"), docker(a, "Docker two")
    client = login_as(a.admin, a.tenant)
    response = upload(client, make_zip(skill_files("fan-out")), targets=[one.id, two.id])
    assert response.status_code == 200, text(response)
    assert response.headers["HX-Retarget"] == "#drawer-slot"
    body = text(response)
    assert "Installing “fan-out”" in body and "2 of 2 installs accepted." in body
    # Issue 27 item 1: each accepted row is the install's live status, not a fixed line.
    assert body.count('class="result-manage"') == 2 and body.count("Installing 0%") == 4
    assert '<section id="skill-list" class="skill-list" aria-label="Skill catalog" ' \
           'hx-swap-oob="true">' in body
    assert chips(body) == [("Docker one", "installing"), ("Docker two", "installing")]
    assert len(dispatcher.submitted) == 2


def test_install_onto_two_docker_configs_leaves_both_installing(world, login_as, dispatcher):
    a, _ = world
    entry = register(a, "pdf-tools")
    one, two = docker(a, "Docker one"), docker(a, "Docker two")
    client = login_as(a.admin, a.tenant)
    drawer = text(client.get(f"/skills/{entry.id}/install", headers={"HX-Request": "true"}))
    assert "Install “pdf-tools”" in drawer and drawer.count('name="sandbox_config_ids"') == 2
    # Issue 22 item 4: what installing trusts the author with, in plain words.
    assert "Installing a skill trusts its author" in drawer

    response = client.post(f"/skills/{entry.id}/install",
                           data={"sandbox_config_ids": [one.id, two.id]},
                           headers=htmx_headers(client, "/skills"))
    assert response.status_code == 200, text(response)
    body = text(response)
    assert "2 of 2 installs accepted." in body and "Refused" not in body
    assert chips(body) == [("Docker one", "installing"), ("Docker two", "installing")]
    rows = list(db.session.scalars(select(InstalledSkill)))
    assert {r.sandbox_config_id for r in rows} == {one.id, two.id}
    assert {r.status for r in rows} == {InstallStatus.installing}
    jobs = [db.session.get(Job, r.job_id) for r in rows]
    assert {(j.kind, j.status) for j in jobs} == {("install_skill", JobStatus.pending)}
    assert sorted(dispatcher.submitted) == sorted(j.id for j in jobs)

    # The install drawer now says where it is installed; the chips say installing.
    drawer = text(client.get(f"/skills/{entry.id}/install", headers={"HX-Request": "true"}))
    assert drawer.count("installing v1.0.0") == 2
    assert chips(text(client.get("/skills"))) == [("Docker one", "installing"),
                                                  ("Docker two", "installing")]


def test_a_partly_refused_install_lists_each_outcome(world, login_as):
    a, b = world
    entry = register(a)
    mine, foreign = docker(a, "Mine"), docker(b, "Theirs")
    client = login_as(a.admin, a.tenant)
    response = client.post(f"/skills/{entry.id}/install",
                           data={"sandbox_config_ids": [mine.id, foreign.id]},
                           headers=htmx_headers(client, "/skills"))
    body = text(response)
    assert "1 of 2 installs accepted." in body and "Follow in Manage" in body
    assert "Refused" in body and "No such sandbox config in this workspace." in body
    assert "Theirs" not in body  # a foreign config is only ever an id


def test_install_with_nothing_picked_or_scripts_off_stays_in_the_form(world, login_as):
    a, _ = world
    entry = register(a)
    config = docker(a, "Mine")
    client = login_as(a.admin, a.tenant)
    response = client.post(f"/skills/{entry.id}/install", data={},
                           headers=htmx_headers(client, "/skills"))
    assert response.status_code == 400
    assert text(response).lstrip().startswith('<form id="install-form"')
    assert slot(text(response), "targets-error") == "Pick at least one sandbox config."

    configs.set_scripts_disabled(a.tenant, SYSTEM, True)
    response = client.post(f"/skills/{entry.id}/install", data={"sandbox_config_ids": config.id},
                           headers=htmx_headers(client, "/skills"))
    assert response.status_code == 403
    assert "Scripts are disabled in this workspace" in text(response)
    assert db.session.scalar(select(func.count()).select_from(InstalledSkill)) == 0
    assert "installs are refused" in text(client.get("/skills"))


# -- files ----------------------------------------------------------------------------------------

def browser_bundle() -> dict[str, bytes]:
    return {
        "SKILL.md": skill_md("browse-me", body="# Browse\n\n<script>alert(1)</script>\n"),
        "scripts/run.py": b"print('hi')\n",
        "assets/logo.png": PNG,
        "assets/blob.bin": b"\x00\x01\x02binary",
        "docs/big.txt": "\n".join(os.urandom(32).hex() for _ in range(16200)).encode(),
    }


def test_the_file_browser_shows_the_tree_and_skill_md_escaped(world, login_as):
    a, _ = world
    entry = register(a, files=browser_bundle())
    response = login_as(a.admin, a.tenant).get(f"/skills/{entry.id}/files")
    assert response.status_code == 200
    body = text(response)
    for name in ("SKILL.md", "run.py", "logo.png", "blob.bin", "big.txt"):
        assert f'<span class="tree-name">{name}</span>' in body
    assert re.search(r'<summary>.*?<span class="tree-name">assets</span></summary>', body, re.S)
    assert '<span class="count">5</span>' in body
    assert "name: browse-me" in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert(1)" not in body
    assert re.search(r'href="/skills/[^"]+/files\?path=SKILL.md"[^>]*aria-current="true"', body)


def test_the_viewer_previews_images_and_names_binaries_and_truncation(world, login_as):
    a, _ = world
    entry = register(a, files=browser_bundle())
    client = login_as(a.admin, a.tenant)
    url = f"/skills/{entry.id}/files"
    image = text(client.get(f"{url}?path=assets/logo.png", headers={"HX-Request": "true"}))
    assert '<img src="data:image/png;base64,iVBORw0KGgo' in image
    assert "<html" not in image and "tree-list" not in image  # htmx: the viewer only
    binary = text(client.get(f"{url}?path=assets/blob.bin", headers={"HX-Request": "true"}))
    assert "Binary file, not shown." in binary
    big = text(client.get(f"{url}?path=docs/big.txt"))
    assert "Truncated." in big and "The first 1 MiB of 1.0 MiB is shown." in big
    assert "tree-list" in big  # a full page without htmx


@pytest.mark.parametrize("path, status, message", [
    ("../etc/passwd", 400, "Invalid skill file path"),
    ("/etc/passwd", 400, "Invalid skill file path"),
    ("scripts\\run.py", 400, "Invalid skill file path"),
    ("nope.md", 404, "Skill file not found"),
    ("Docs/README.MD", 404, "Skill file not found"),
])
def test_a_bad_path_shows_its_error(world, login_as, path, status, message):
    a, _ = world
    entry = register(a)
    response = login_as(a.admin, a.tenant).get(f"/skills/{entry.id}/files",
                                               query_string={"path": path})
    assert response.status_code == status
    assert message in text(response) and "tree-list" in text(response)
    assert f'<span class="file-path mono">{path}</span>' in text(response)


# -- delete ---------------------------------------------------------------------------------------

def test_delete_is_disabled_while_installed_and_refused_with_its_message(world, login_as,
                                                                         bundle_dir):
    a, _ = world
    entry = register(a)
    service.install(a.tenant, SYSTEM, entry, [docker(a, "Mine").id])
    client = login_as(a.admin, a.tenant)
    body = text(client.get("/skills"))
    assert re.search(r'<span class="disabled-why" title="Installed on 1 sandbox config: remove '
                     r'it from each before deleting it\."[^>]*>\s*<button type="submit" '
                     r'class="btn btn-ghost-danger btn-sm" disabled>Delete</button>', body)
    response = client.post(f"/skills/{entry.id}/delete", headers=htmx_headers(client, "/skills"))
    assert response.status_code == 409
    assert response.headers["HX-Retarget"] == "#flashes"
    assert "Remove this skill from every sandbox before deleting it" in text(response)
    assert catalog_rows() == 1 and len(skill_registry.stored_blobs(bundle_dir)) == 1


def test_delete_without_installations_removes_the_card_and_the_bundle(world, login_as,
                                                                      bundle_dir):
    a, _ = world
    entry = register(a, "short-lived")
    keep = register(a, "keeper")
    client = login_as(a.admin, a.tenant)
    response = client.post(f"/skills/{entry.id}/delete", headers=htmx_headers(client, "/skills"))
    assert response.status_code == 200
    body = text(response)
    assert "Deleted “short-lived” from the catalog." in body
    assert "keeper" in body and f'id="skill-{entry.id}"' not in body
    db.session.expire_all()
    assert db.session.get(SkillCatalogEntry, entry.id).deleted_at is not None
    assert skill_registry.stored_blobs(bundle_dir) == [keep.bundle_ref]
    assert client.get(f"/skills/{entry.id}/files").status_code == 404


# -- roles and tenancy ----------------------------------------------------------------------------

def test_a_viewer_is_refused_every_admin_route(world, login_as, bundle_dir):
    a, _ = world
    entry = register(a)
    client = login_as(a.viewer, a.tenant)
    for path in ("/skills/new", f"/skills/{entry.id}/install", f"/skills/{entry.id}/files"):
        assert client.get(path).status_code == 403, path
    token = csrf_token(client, "/skills")
    for path in ("/skills", f"/skills/{entry.id}/install", f"/skills/{entry.id}/delete"):
        response = client.post(path, data={"csrf_token": token, "source": "@acme/x"},
                               headers={"X-CSRFToken": token})
        assert response.status_code == 403, path
    assert catalog_rows() == 1 and db.session.get(SkillCatalogEntry, entry.id).deleted_at is None


def test_another_workspaces_skill_is_a_404(world, login_as):
    a, b = world
    theirs = register(b, "their-skill")
    client = login_as(a.owner, a.tenant)
    for path in (f"/skills/{theirs.id}/install", f"/skills/{theirs.id}/files",
                 f"/skills/{theirs.id}/files?path=SKILL.md"):
        assert client.get(path).status_code == 404, path
    headers = htmx_headers(client, "/skills")
    for path in (f"/skills/{theirs.id}/install", f"/skills/{theirs.id}/delete"):
        assert client.post(path, data={"sandbox_config_ids": []},
                           headers=headers).status_code == 404
    assert "their-skill" not in text(client.get("/skills"))
    assert db.session.get(SkillCatalogEntry, theirs.id).deleted_at is None
