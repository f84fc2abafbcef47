"""The Sandboxes section in headless Chromium against the live server: add a Docker config
through the drawer, with the live network-policy check, and leave screenshots."""

from __future__ import annotations

import re

import pytest

from app.services import audit
from app.services.sandboxes import configs as service
from tests import factories
from tests.web._support import confirm
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("private_endpoints")]


TAB_TIMEOUT_MS = 10_000  # read by the shared `tab` fixture


@pytest.fixture
def workspace() -> factories.TenantUsers:
    """A workspace with remote configs on loopback (nothing leaves this machine)."""
    group = factories.populate("Acme Research")
    actor = audit.SystemActor(group.owner.email)
    service.create_config(
        group.tenant, actor, "E2B production", "Agents' default sandboxes.",
        factories.config_doc("e2b", {"api_key": "e2b_canary_not_shown",
                                     "api_url": "http://127.0.0.1:3000",
                                     "template_id": "python-3.12"},
                             network={"deny_egress_by_default": True,
                                      "allow_out": ["pypi.org", "files.pythonhosted.org",
                                                    "*.github.com"]}))
    service.create_config(
        group.tenant, actor, "Cube cluster", "GPU-backed sandboxes for evals.",
        factories.config_doc("cube", {"api_url": "http://127.0.0.1:8443",
                                      "proxy_url": "http://127.0.0.1:8444",
                                      "sandbox_domain": "sandbox.cube.internal",
                                      "template_id": "cube-desktop-2",
                                      "cube_sandbox_ttl_seconds": 3600},
                             desktop_enabled=True,
                             network={"deny_out": ["10.0.0.0/8", "192.168.0.0/16"]}))
    return group


def test_admin_adds_a_docker_config_with_a_live_policy_check(tab, workspace):
    sign_in(tab, workspace.admin.email)
    tab.get_by_role("link", name="Sandboxes", exact=True).click()
    tab.wait_for_url(re.compile(r"/sandboxes$"))
    tab.get_by_role("link", name="Add sandbox config").click()
    drawer = tab.locator(".drawer")
    drawer.get_by_label("Name", exact=True).fill("Local Docker")
    drawer.get_by_label("Description").fill("The engine on this host, for quick experiments.")
    drawer.get_by_role("button", name="Load templates").click()
    drawer.locator(".pick", has_text="sandlot/sandbox:base").click()
    assert drawer.get_by_label("Image").input_value() == "sandlot/sandbox:base"

    drawer.get_by_label("Deny egress by default").check()
    drawer.get_by_role("button", name="Add destination").first.click()
    entry = drawer.get_by_label("Allowed destination", exact=True).first
    entry.fill("pypi.org")
    drawer.get_by_role("button", name="Add destination").first.click()
    bad = drawer.get_by_label("Allowed destination", exact=True).nth(1)
    bad.fill("files.python hosted.org")
    error = drawer.locator("#err-network-allow_out-1")
    error.get_by_text("must not contain spaces").wait_for()
    tab.get_by_text("1 problem in this policy").wait_for()
    drawer.locator("#editor-network legend").evaluate("el => el.scrollIntoView()")
    tab.mouse.move(0, 0)
    shot(tab, "sandbox-editor.png")

    bad.fill("files.pythonhosted.org")
    tab.get_by_text("Policy is valid").wait_for()
    assert error.inner_text() == ""
    drawer.get_by_role("button", name="Add config").click()
    card = tab.locator(".sandbox-card", has_text="Local Docker")
    card.wait_for()
    tab.get_by_text("Added “Local Docker”.").wait_for()
    assert tab.locator(".drawer").count() == 0
    assert "Default deny · 2 allowed" in card.inner_text()
    assert "docker · sandlot/sandbox:base" in card.inner_text()
    tab.locator(".flash [data-dismiss]").click()
    tab.locator(".flash").wait_for(state="detached")
    tab.mouse.move(0, 0)
    shot(tab, "sandboxes.png")


@pytest.mark.console_errors("status of 409", "Error Code 409")  # the refused delete
def test_admin_turns_scripts_off_and_force_deletes_an_unverifiable_config(tab, workspace):
    service.create_config(workspace.tenant, audit.SystemActor("tests"), "Old engine", "", {
        "sandbox_type": "docker",
        "docker": {"image": "sandlot/sandbox:base", "engine": "missing"}})
    sign_in(tab, workspace.admin.email)
    tab.goto("/sandboxes")
    switch = tab.get_by_role("switch", name="Workspace scripts")
    switch.click()
    confirm(tab)
    tab.get_by_text("Off: no agent may run scripts").wait_for()
    assert tab.get_by_role("switch", name="Workspace scripts").get_attribute("aria-checked") \
        == "false"

    card = tab.locator(".sandbox-card", has_text="Old engine")
    card.get_by_role("button", name="Delete").click()
    confirm(tab)
    drawer = tab.locator(".drawer")
    drawer.get_by_text("Inventory unverifiable.").wait_for()
    drawer.get_by_role("button", name="Force delete").click()
    confirm(tab)
    tab.get_by_text("Deleted “Old engine”.").wait_for()
    assert tab.locator(".sandbox-card", has_text="Old engine").count() == 0
    assert tab.locator(".drawer").count() == 0


@pytest.mark.parametrize("width", [1280, 390])
def test_the_editor_answers_would_this_be_allowed_as_you_type(tab, workspace, width):
    """Issue 24 item 4: the verdict and deciding rule for a host, from the policy the form
    holds now (an edit not saved yet included); the console guard (conftest) fails it on
    any error the swaps log."""
    tab.set_viewport_size({"width": width, "height": 900})
    sign_in(tab, workspace.admin.email)
    tab.goto("/sandboxes")
    tab.locator(".sandbox-card", has_text="E2B production").get_by_role("link").first.click()
    drawer = tab.locator(".drawer")
    ask = drawer.get_by_label("Host or IPv4 address")
    ask.fill("api.github.com")
    answer = drawer.locator("#explain-result")
    answer.get_by_text("api.github.com matches *.github.com in Allowed destinations.").wait_for()
    assert "allow_out[2] *.github.com" in answer.inner_text()
    ask.press("Enter")  # asks; never saves the config
    ask.fill("github.com")
    answer.get_by_text("Denied").wait_for()
    assert "default deny" in answer.inner_text()
    # the unsaved policy answers: turn deny-by-default off and the apex is open
    drawer.get_by_label("Deny egress by default").uncheck()
    answer.get_by_text("Fix the network policy first").wait_for()  # domains need deny-all
    drawer.get_by_label("Deny egress by default").check()
    answer.get_by_text("Denied").wait_for()
    ask.fill("api.github.com")
    answer.get_by_text("Allowed").wait_for()
    answer.scroll_into_view_if_needed()
    tab.mouse.move(0, 0)
    shot(tab, f"sandbox-explain-{width}.png")
    assert tab.locator(".drawer").count() == 1  # Enter asked; it did not save
    width_used = tab.evaluate("document.documentElement.scrollWidth")
    assert width_used <= width, width_used


def _tabs_to(tab, name: str, limit: int = 60) -> int:
    """How many Tab presses from the top of the page focus the element named `name`."""
    tab.goto("/sandboxes")
    for presses in range(1, limit + 1):
        tab.keyboard.press("Tab")
        focused = tab.evaluate("(document.activeElement.innerText || '').trim()")
        if focused == name:
            return presses
    return limit + 1


@pytest.mark.parametrize("width", [1440, 390])
def test_the_header_adds_a_config_early_and_cards_show_their_last_check(tab, workspace,
                                                                        width):
    """Issue 27 item 12: 'New sandbox config' is a few Tabs in (the add card at the grid's
    end took 26), and each card shows its last check's outcome and when."""
    from datetime import timedelta

    from app.extensions import db
    from app.models import Job, JobStatus, SandboxConfig
    from app.models.types import utcnow

    e2b = db.session.query(SandboxConfig).filter_by(name="E2B production").one()
    db.session.add(Job(id="0b5f3c2e-8f7a-4b61-9d2e-3a1c5e7f9b20", tenant_id=e2b.tenant_id,
                       kind="sandbox_check", target_type="sandbox_config", target_id=e2b.id,
                       status=JobStatus.succeeded, params={"provider": "e2b"}, log="",
                       result={"ok": False, "provider": "e2b", "deep": False, "checks": [],
                               "capabilities": {}},
                       timeout_sec=60, created_at=utcnow() - timedelta(minutes=5)))
    db.session.commit()
    tab.set_viewport_size({"width": width, "height": 900})
    sign_in(tab, workspace.admin.email)

    header = _tabs_to(tab, "New sandbox config")
    assert header < _tabs_to(tab, "Add sandbox config")
    assert header <= 16, header  # past the sidebar; after "Skip to content", the first:
    tab.goto("/sandboxes")
    tab.keyboard.press("Tab")
    tab.keyboard.press("Enter")
    tab.keyboard.press("Tab")
    assert tab.evaluate("document.activeElement.innerText.trim()") == "New sandbox config"
    card = tab.locator(".sandbox-card", has_text="E2B production")
    last = card.locator(".sandbox-check")
    assert last.get_by_role("link", name="Check found problems").get_attribute("href") \
        == "/sandboxes/checks/0b5f3c2e-8f7a-4b61-9d2e-3a1c5e7f9b20"
    assert "5 min" in last.inner_text()
    assert "Never checked" in tab.locator(".sandbox-card", has_text="Cube cluster") \
        .locator(".sandbox-check").inner_text()
    tab.mouse.move(0, 0)
    shot(tab, f"sandboxes-header-{width}.png")
    tab.get_by_role("link", name="New sandbox config").click()
    tab.locator(".drawer").get_by_role("heading", name="Add sandbox config").wait_for()
    width_used = tab.evaluate("document.documentElement.scrollWidth")
    assert width_used <= width, width_used
