"""The sandbox check in headless Chromium: "Test connection" on the demo's Docker config,
from the editor drawer, against the real local engine; leaves sandbox-check.png."""

from __future__ import annotations

import re

import pytest

from app.services import audit, demo
from app.services.sandboxes import configs as service
from tests import factories
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


def test_admin_tests_the_connection_of_the_demo_config(tab, workspace):
    sign_in(tab, workspace.admin.email)
    drawer = open_editor(tab, demo.DEMO_CONFIG)

    drawer.get_by_role("button", name="Test connection").click()

    result = drawer.locator("#sandbox-check .check-result")
    result.locator(".status", has_text="Passed").wait_for()
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
    shot(tab, "sandbox-check.png")


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
