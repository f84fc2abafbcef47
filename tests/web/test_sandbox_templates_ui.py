"""The editor's Ensure/Rebuild template buttons and the card's template status, through
the Flask client against the local fake E2B server: the buttons post the form as it
stands, the answer is a fragment that polls the build job until it ends with 286."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from app.extensions import db
from app.models import SandboxConfig
from app.services import audit
from app.services.sandboxes import configs as service
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, require_docker
from tests.factories import config_doc
from tests.web._support import post_form, text

pytestmark = pytest.mark.usefixtures("private_endpoints")

BUILD = "/sandboxes/editor/templates/build"
POLL = re.compile(r'hx-get="(/sandboxes/template-builds/[0-9a-f-]{36}[^"]*)" hx-trigger="every 1s"')


@pytest.fixture(scope="module")
def fake() -> Iterator[object]:
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer("e2b", image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}tplui").start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _images(app, monkeypatch, fake):
    monkeypatch.setitem(app.config, "SANDBOX_TEMPLATE_STANDARD_IMAGE", BASE_IMAGE)
    monkeypatch.setitem(app.config, "SANDBOX_TEMPLATE_DESKTOP_IMAGE", BASE_IMAGE)
    fake.build_seconds, fake.failing_images = 0.5, set()
    for template_id in fake.template_named("sandlot-standard-") + fake.template_named(
            "sandlot-desktop-"):
        del fake.templates[template_id]


@pytest.fixture
def group(two_tenants):
    return two_tenants[0]


def stored(group, fake, name: str = "E2B account") -> SandboxConfig:
    settings = {k: v for k, v in fake.settings().items() if k != "allow_private_endpoints"}
    return service.create_config(group.tenant, audit.SystemActor("t"), name, "",
                                 config_doc("e2b", settings))


def form(fake, row: SandboxConfig | None, **extra) -> dict[str, str]:
    settings = fake.settings()
    data = {"name": "E2B account", "sandbox_type": "e2b", "allow_private_endpoints": "on",
            "e2b.api_key": "***" if row else settings["api_key"],
            "e2b.api_url": settings["api_url"], "e2b.proxy_url": settings["proxy_url"],
            "e2b.sandbox_domain": settings["sandbox_domain"],
            "e2b.template_id": settings["template_id"]}
    if row is not None:
        data["config_id"] = row.id
    return {**data, **extra}


def follow(client, first, seconds: float = 60) -> list:
    answers = [first]
    match = POLL.search(text(first))
    deadline = time.monotonic() + seconds
    while match:
        response = client.get(match.group(1).replace("&amp;", "&"),
                              headers={"HX-Request": "true"})
        answers.append(response)
        if response.status_code == 286:
            assert POLL.search(text(response)) is None
            break
        assert response.status_code == 200 and time.monotonic() < deadline
        time.sleep(0.2)
    return answers


def test_the_editor_offers_ensure_and_rebuild_for_e2b_only(group, login_as, fake):
    row = stored(group, fake)
    client = login_as(group.admin, group.tenant)
    edit = text(client.get(f"/sandboxes/{row.id}/edit", headers={"HX-Request": "true"}))
    assert "Ensure standard" in edit and "Rebuild desktop" in edit
    new = text(client.get("/sandboxes/new?backend=e2b", headers={"HX-Request": "true"}))
    assert "Ensure desktop" in new and "Rebuild" not in new  # nothing stored to switch yet
    docker = text(client.get("/sandboxes/new?backend=docker", headers={"HX-Request": "true"}))
    assert "Ensure standard" not in docker


def test_ensure_from_an_unsaved_form_builds_and_offers_the_new_template(group, login_as,
                                                                        fake):
    client = login_as(group.admin, group.tenant)
    first = post_form(client, BUILD, form(fake, None, template_role="desktop",
                                          template_action="ensure"), htmx=True)
    assert first.status_code == 202, text(first)
    answers = follow(client, first)
    last = text(answers[-1])
    assert answers[-1].status_code == 286 and "Ready" in last
    built = fake.template_named("sandlot-desktop-")
    assert len(built) == 1 and f'data-pick="{built[0]}"' in last
    assert 'data-for="f-e2b-template_id"' in last and "Use it" in last
    assert fake.api_key not in "".join(text(a) for a in answers)
    again = post_form(client, BUILD, form(fake, None, template_role="desktop",
                                          template_action="ensure"), htmx=True)
    assert again.status_code == 200 and "already in the catalog" in text(again)


def test_rebuild_switches_the_config_and_a_failed_build_says_why(group, login_as, fake):
    row = stored(group, fake)
    client = login_as(group.admin, group.tenant)
    answers = follow(client, post_form(client, BUILD, form(
        fake, row, template_role="standard", template_action="rebuild"), htmx=True))
    assert answers[-1].status_code == 286 and "now boots from" in text(answers[-1])
    db.session.expire_all()
    new = db.session.get(SandboxConfig, row.id).config["e2b"]["template_id"]
    assert new.startswith("tpl") and new in fake.templates

    fake.failing_images = {BASE_IMAGE}
    failed = follow(client, post_form(client, BUILD, form(
        fake, row, template_role="standard", template_action="rebuild"), htmx=True))
    page = text(failed[-1])
    assert "Failed" in page and "standard template build failed" in page


def test_rebuild_is_refused_while_skills_are_baked(group, login_as, fake):
    row = stored(group, fake)
    row.config = {**row.config, "skill_image": {"snapshot_id": "snap-9", "generation": 1}}
    db.session.commit()
    client = login_as(group.admin, group.tenant)
    refused = post_form(client, BUILD, form(fake, row, template_role="standard",
                                            template_action="rebuild"), htmx=True)
    assert refused.status_code == 409
    assert "uninstall them" in text(refused) and "Not started" in text(refused)


def test_the_card_shows_the_templates_status(group, login_as, fake):
    row = stored(group, fake)
    client = login_as(group.viewer, group.tenant)
    page = text(client.get("/sandboxes"))
    assert f'hx-get="/sandboxes/{row.id}/template-status"' in page
    badge = text(client.get(f"/sandboxes/{row.id}/template-status",
                            headers={"HX-Request": "true"}))
    assert "Template ready" in badge
    fake.untag(fake.template_id)
    try:
        badge = text(client.get(f"/sandboxes/{row.id}/template-status",
                                headers={"HX-Request": "true"}))
        assert "Template untagged" in badge and "never become ready" in badge
    finally:
        fake.templates[fake.template_id].pop("tags", None)
