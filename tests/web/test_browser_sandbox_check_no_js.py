"""Without JavaScript the editor's Test connection, Deep check and Load templates still
answer (issue 27 item 8): each posts the form as it stands to a page; a check's page
reloads itself (a meta refresh) until the check ends."""

from __future__ import annotations

import re

import pytest

from app.services import audit, demo
from app.services.sandboxes import configs as service
from tests import factories
from tests.backends.conftest import require_docker
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]

SIZES = {1440: {"width": 1440, "height": 900}, 390: {"width": 390, "height": 844}}


@pytest.fixture
def workspace() -> factories.TenantUsers:
    require_docker()
    group = factories.populate("Acme Research")
    service.create_config(group.tenant, audit.SystemActor(group.owner.email), demo.DEMO_CONFIG,
                          "", demo.DEMO_DOCKER)
    return group


@pytest.fixture(params=list(SIZES))
def no_js(request, chromium, live_server):
    context = chromium.new_context(java_script_enabled=False, base_url=live_server,
                                   viewport=SIZES[request.param])
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.width = request.param
    yield page
    context.close()


def edit(page) -> None:
    page.goto("/sandboxes")
    page.locator(".sandbox-card", has_text=demo.DEMO_CONFIG).get_by_role("link",
                                                                       name="Edit").click()
    page.get_by_role("heading", name=f"Edit “{demo.DEMO_CONFIG}”").wait_for()


def fits(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= page.width


def test_the_checks_and_the_catalog_answer_without_javascript(no_js, workspace):
    sign_in(no_js, workspace.admin.email)
    edit(no_js)

    no_js.get_by_role("button", name="Test connection").click()
    no_js.wait_for_url(re.compile(r"/sandboxes/checks/[0-9a-f-]{36}$"))
    result = no_js.locator(".check-result")
    result.locator(".status", has_text="Passed").wait_for(timeout=30_000)  # refreshed itself
    assert no_js.locator("meta[http-equiv=refresh]").count() == 0  # ended: no more reloads
    result.locator("summary").click()  # <details> opens without JavaScript
    assert "Image sandlot/sandbox:base is on the engine." in result.inner_text()
    shot(no_js, f"sandbox-check-no-js-{no_js.width}.png")
    fits(no_js)
    no_js.get_by_role("link", name=f"Back to “{demo.DEMO_CONFIG}”").click()
    no_js.get_by_role("heading", name=f"Edit “{demo.DEMO_CONFIG}”").wait_for()

    no_js.get_by_role("button", name="Load templates").click()
    no_js.get_by_role("heading", name="Images on the engine").wait_for()
    assert "sandlot/sandbox:base" in no_js.locator(".pick-list").inner_text()
    shot(no_js, f"sandbox-templates-no-js-{no_js.width}.png")
    fits(no_js)

    edit(no_js)
    no_js.get_by_role("button", name="Deep check").click()
    no_js.wait_for_url(re.compile(r"/sandboxes/checks/[0-9a-f-]{36}$"))
    result = no_js.locator(".check-result")
    assert "Deep check" in result.locator(".check-title").inner_text()
    result.locator(".status", has_text=re.compile("Passed|Failed")).wait_for(timeout=120_000)
    assert "Sandbox runs a command" in result.inner_text()
