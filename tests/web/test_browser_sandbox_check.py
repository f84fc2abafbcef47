"""The sandbox check in headless Chromium: "Test connection" on the demo's Docker config,
from the editor drawer, against the real local engine; leaves sandbox-check.png."""

from __future__ import annotations

import re

import pytest

from app.services import audit, demo
from app.services.sandboxes import configs as service
from tests import factories
from tests.api import check_world
from tests.api.check_world import DENIED, DOWN_NAME, OPEN, OPEN_NAME
from tests.backends.conftest import require_docker
from tests.web._support import confirm
from tests.web.test_browser import shot, sign_in

pytestmark = pytest.mark.browser


TAB_TIMEOUT_MS = 20_000  # read by the shared `tab` fixture


@pytest.fixture
def workspace() -> factories.TenantUsers:
    """The demo's Docker config (the local engine, the base image), as `flask demo seed`
    makes it."""
    require_docker()
    group = factories.populate("Acme Research")
    service.create_config(group.tenant, audit.SystemActor(group.owner.email), demo.DEMO_CONFIG,
                          "The local Docker engine with the base sandbox image.",
                          demo.DEMO_DOCKER)
    return group


def open_editor(tab, name: str):
    tab.goto("/sandboxes")
    tab.locator(".sandbox-card", has_text=name).get_by_role("link", name="Edit").click()
    drawer = tab.locator(".drawer")
    drawer.get_by_role("button", name="Test connection").wait_for()
    return drawer


@pytest.mark.parametrize("width", [1440, 390])
def test_admin_tests_the_connection_of_the_demo_config(tab, workspace, width):
    tab.set_viewport_size({"width": width, "height": 900 if width > 390 else 844})
    suffix = "" if width > 390 else "-390"
    sign_in(tab, workspace.admin.email)
    drawer = open_editor(tab, demo.DEMO_CONFIG)

    drawer.get_by_role("button", name="Test connection").click()

    result = drawer.locator("#sandbox-check .check-result")
    result.locator(".status", has_text="Passed").wait_for()
    # Issue 27 item 7: a clean pass folds to its summary line; the steps open on demand.
    assert result.locator("details").get_attribute("open") is None
    assert "3 of 5 tried" in result.locator("summary").inner_text()
    tab.mouse.move(0, 0)
    shot(tab, f"sandbox-check-folded{suffix}.png")
    result.locator("summary").click()
    rows = result.locator(".check-row")
    assert rows.count() == 5
    names = [rows.nth(i).locator(".check-name").inner_text() for i in range(5)]
    assert names == ["Control plane reachable", "Engine access", "Template available",
                     "Sandbox runs a command", "Outbound internet"]
    assert result.locator(".check-row.is-ok").count() == 3
    assert result.locator(".check-row.is-skipped").count() == 2
    assert "Image sandlot/sandbox:base is on the engine" in result.inner_text()
    assert "a local engine needs no credentials" in result.inner_text()  # issue 27 item 10
    assert result.get_attribute("hx-get") is None  # the fragment stopped polling
    tab.mouse.move(0, 0)
    shot(tab, f"sandbox-check{suffix}.png")


def test_deep_check_of_an_unsaved_change_reports_the_unreachable_engine(tab, workspace):
    sign_in(tab, workspace.admin.email)
    drawer = open_editor(tab, demo.DEMO_CONFIG)
    drawer.get_by_label("Engine").select_option("missing")  # listed, but not running

    drawer.get_by_role("button", name="Deep check").click()
    assert "creates a real sandbox" in confirm(tab)

    result = drawer.locator("#sandbox-check .check-result")
    result.locator(".status", has_text="Failed").wait_for()
    failed = result.locator(".check-row.is-failed")
    assert failed.count() == 1
    assert re.search(r"The Docker engine “missing” could not be reached; ask the operator "
                     r"whether the engine is up \(reference [0-9a-f]{8}", failed.inner_text())
    assert "/tmp/" not in result.inner_text()  # the operator's socket path stays hidden
    assert result.locator(".check-row.is-skipped",
                          has_text="Not tried: the control plane could not be reached") \
        .count() == 4
    tab.mouse.move(0, 0)
    shot(tab, "sandbox-check-unreachable.png")


@pytest.fixture
def probe_world(app, tmp_path):
    with check_world.probing(app, tmp_path):
        yield


@pytest.mark.parametrize("width", [1440, 390])
def test_deep_check_shows_each_allowed_destination(tab, workspace, probe_world, width):
    """Issue 27 item 4: deny by default with two allowed names, one of them down. The check
    probes both and says which answered (names in their own case), passes with a warning,
    shows the denied target blocked, and names fields by their labels. Item 7: on a phone
    the results take at most a third of the screen."""
    tab.set_viewport_size({"width": width, "height": 844 if width == 390 else 900})
    service.create_config(workspace.tenant, audit.SystemActor(workspace.owner.email),
                          "Allow-list", "", {**demo.DEMO_DOCKER, "network": {
                              "deny_egress_by_default": True,
                              "allow_out": [OPEN_NAME, DOWN_NAME]}})
    sign_in(tab, workspace.admin.email)
    drawer = open_editor(tab, "Allow-list")

    drawer.get_by_role("button", name="Deep check").click()
    confirm(tab)

    result = drawer.locator("#sandbox-check .check-result")
    result.locator(".status", has_text="Passed with a warning").wait_for(timeout=120_000)
    assert result.locator("details").get_attribute("open") is not None  # a warning: open
    egress = result.locator(".check-row", has_text="Outbound internet")
    assert "is-warn" in egress.get_attribute("class")
    targets = egress.locator(".check-target")
    assert targets.nth(0).inner_text().split("\n")[0] == OPEN_NAME  # case kept
    assert "Allowed · reachable (HTTP 200)" in targets.nth(0).inner_text()
    assert "Allowed · not reachable" in targets.nth(1).inner_text()
    assert DOWN_NAME in targets.nth(1).inner_text()
    for denied in (DENIED, OPEN):  # the deployment's probe URLs, which the policy denies
        assert "Denied · blocked" in egress.locator(".check-target", has_text=denied).inner_text()
    canary = result.locator(".check-row", has_text="Denied traffic blocked")
    assert "is-ok" in canary.get_attribute("class")
    text = result.inner_text()
    assert "allow_out" not in text and "Not tried" not in text
    egress.scroll_into_view_if_needed()
    tab.mouse.move(0, 0)
    shot(tab, f"sandbox-check-allowed-{width}.png")
    if width == 390:
        panel = drawer.locator("#sandbox-check").bounding_box()
        assert panel["height"] <= 844 / 3 + 1, panel
        width_used = tab.evaluate("document.documentElement.scrollWidth")
        assert width_used <= width, width_used


def test_enter_in_a_field_still_saves(tab, workspace):
    """The check and catalog buttons are submit buttons now (their no-JavaScript fallback,
    issue 27 item 8): Enter in a field must still save, not start a check."""
    sign_in(tab, workspace.admin.email)
    drawer = open_editor(tab, demo.DEMO_CONFIG)
    drawer.get_by_label("Name").fill("Renamed engine")
    drawer.get_by_label("Name").press("Enter")
    tab.locator(".sandbox-card", has_text="Renamed engine").wait_for()
    assert tab.locator(".drawer").count() == 0
    assert tab.locator("#sandbox-check .check-result").count() == 0
