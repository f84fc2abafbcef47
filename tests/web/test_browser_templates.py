"""The editor's Template section in headless Chromium against the local fake E2B server:
Ensure builds the desktop template (a build of a few seconds) with its progress, Rebuild
switches the config to a fresh standard template, and the card shows the template's
status. Leaves sandbox-template-building*.png and sandbox-template-built*.png at
1440x900 and 390x844."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.services import audit
from app.services.sandboxes import configs as service
from tests import factories
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, RUN_ID, require_docker
from tests.web._support import confirm
from tests.web.test_browser import shot, sign_in
from tests.web.test_browser_endpoints import SIZES, no_horizontal_scroll, page_at

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("private_endpoints")]

NAME = "E2B research account"


@pytest.fixture(scope="module")
def fake() -> Iterator[object]:
    require_docker()
    from tests.fakes.e2b_server import FakeE2BServer

    server = FakeE2BServer("e2b", image=BASE_IMAGE, docker_host=DOCKER_HOST,
                           run_id=f"{RUN_ID}tplb").start()
    yield server
    server.stop()


@pytest.fixture
def workspace(app, monkeypatch, fake) -> factories.TenantUsers:
    monkeypatch.setitem(app.config, "SANDBOX_TEMPLATE_STANDARD_IMAGE", BASE_IMAGE)
    monkeypatch.setitem(app.config, "SANDBOX_TEMPLATE_DESKTOP_IMAGE", BASE_IMAGE)
    monkeypatch.setitem(app.config, "SANDBOX_TEMPLATE_POLL_SECONDS", 0.5)
    fake.build_seconds = 4.0
    for template_id in fake.template_named("sandlot-standard-") + fake.template_named(
            "sandlot-desktop-"):
        del fake.templates[template_id]
    group = factories.populate("Acme Research")
    settings = {k: v for k, v in fake.settings().items() if k != "allow_private_endpoints"}
    service.create_config(group.tenant, audit.SystemActor(group.owner.email), NAME,
                          "The team's E2B account.",
                          factories.config_doc("e2b", settings))
    return group


def open_editor(page):
    page.goto("/sandboxes")
    card = page.locator(".sandbox-card", has_text=NAME)
    card.locator(".template-status", has_text="Template ready").wait_for()
    card.get_by_role("link", name="Edit").click()
    drawer = page.locator(".drawer")
    drawer.get_by_role("button", name="Ensure desktop").wait_for()
    return drawer


@pytest.mark.parametrize("suffix", SIZES)
def test_ensure_shows_the_builds_progress_then_the_template(chromium, live_server, workspace,
                                                            fake, suffix):
    with page_at(chromium, live_server, SIZES[suffix]) as page:
        page.set_default_timeout(30_000)
        sign_in(page, workspace.admin.email)
        drawer = open_editor(page)

        drawer.get_by_role("button", name="Ensure desktop").click()
        build = drawer.locator("#template-build .template-build")
        build.locator(".status", has_text="Building").wait_for()
        assert "Ensuring the desktop template" in build.inner_text()
        build.scroll_into_view_if_needed()
        no_horizontal_scroll(page)
        page.mouse.move(0, 0)
        shot(page, f"sandbox-template-building{suffix}.png")

        build.locator(".status", has_text="Ready").wait_for()
        built = fake.template_named("sandlot-desktop-")
        assert len(built) == 1 and built[0] in build.inner_text()
        assert build.get_attribute("hx-get") is None  # the fragment stopped polling
        build.get_by_role("button", name="Use it").click()
        assert drawer.locator("#f-e2b-template_id").input_value() == built[0]
        build.scroll_into_view_if_needed()
        no_horizontal_scroll(page)
        page.mouse.move(0, 0)
        shot(page, f"sandbox-template-built{suffix}.png")
        assert fake.api_key not in page.content()


def test_rebuild_switches_the_config_to_a_fresh_template(chromium, live_server, workspace,
                                                         fake):
    with page_at(chromium, live_server, SIZES[""]) as page:
        page.set_default_timeout(30_000)
        sign_in(page, workspace.admin.email)
        drawer = open_editor(page)
        drawer.get_by_role("button", name="Rebuild standard").click()
        assert "Every config of this account that uses it switches" in confirm(page)
        build = drawer.locator("#template-build .template-build")
        build.locator(".status", has_text="Ready").wait_for()
        built = fake.template_named("sandlot-standard-")
        assert len(built) == 1
        assert "1 config of this account now boots from" in build.inner_text()
        page.goto("/sandboxes")
        card = page.locator(".sandbox-card", has_text=NAME)
        assert built[0] in card.inner_text()
        card.locator(".template-status", has_text="Template ready").wait_for()
        page.mouse.move(0, 0)
        shot(page, "sandbox-template-card.png")
