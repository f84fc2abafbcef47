"""The console's dialogs in Chromium (issue 15 items 1 and 4): the phone menu, drawers that
keep focus, close on Escape (asking first over unsaved changes), push their URL and title,
confirmation popovers instead of browser dialogs, and tables that stack on a phone."""

from __future__ import annotations

import re

import pytest

from app.services import audit
from app.services.identity import api_keys
from tests import factories
from tests.sweeps import routes
from tests.web.test_a11y import serious
from tests.web.test_browser import SHOTS, sign_in

pytestmark = pytest.mark.browser
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}


@pytest.fixture
def world() -> factories.TenantUsers:
    group = factories.populate("Acme Research")
    owner = audit.SystemActor(group.owner.email)
    api_keys.create_key(group.tenant, owner, name="Nightly evals", full_access=True,
                        capabilities=[], expires_at=None, pepper=factories.PEPPER)
    routes.make_sandbox_config(group.tenant)
    return group


@pytest.fixture
def dialogs(tab) -> list[str]:
    """Every browser dialog the page opens (there should be none)."""
    seen: list[str] = []
    tab.on("dialog", lambda dialog: seen.append(dialog.message))
    return seen


def focus_inside(tab, selector: str) -> bool:
    return tab.evaluate("s => document.querySelector(s).contains(document.activeElement)",
                        selector)


def test_phone_menu_folds_the_sidebar_and_escape_closes_it(tab, world):
    tab.set_viewport_size(PHONE)
    sign_in(tab, world.owner.email)
    menu = tab.get_by_role("button", name="Menu")
    assert menu.get_attribute("aria-expanded") == "false"
    members = tab.get_by_role("link", name="Members", exact=True)
    assert members.is_hidden()
    assert tab.locator("h1").bounding_box()["y"] < 200  # the page, not the sidebar, comes first

    menu.click()
    assert menu.get_attribute("aria-expanded") == "true"
    members.wait_for()
    assert focus_inside(tab, "#sidebar")
    tab.screenshot(path=str(SHOTS / "menu-open-390.png"))
    assert serious(tab) == []
    tab.keyboard.press("Escape")
    assert menu.get_attribute("aria-expanded") == "false"
    assert members.is_hidden()
    assert tab.evaluate("document.activeElement.hasAttribute('data-menu-toggle')")

    menu.click()
    members.click()
    tab.wait_for_url(re.compile(r"/members$"))
    assert tab.evaluate("document.documentElement.scrollWidth") <= 390

    tab.set_viewport_size(DESKTOP)
    assert menu.is_hidden()
    tab.get_by_role("link", name="API keys", exact=True).wait_for()


def held_until(tab, held: dict, key: str) -> None:
    """Let the page run until the route handler has held request `key`."""
    for _ in range(500):
        if key in held:
            return
        tab.wait_for_timeout(10)  # lets Playwright dispatch the route handler
    raise AssertionError(f"no {key} request was made")


def test_focus_goes_back_to_the_opener_when_another_request_settles_meanwhile(tab, world):
    # The card's template status loads by itself; if it settles while the drawer's own
    # request is in flight, the drawer must still know which link opened it.
    held: dict = {}
    tab.route(re.compile(r".*/template-status$"), lambda route: held.setdefault("status", route))
    tab.route(re.compile(r".*/sandboxes/new$"),
              lambda route: held.setdefault("drawer", route)
              if route.request.headers.get("hx-request") else route.continue_())
    sign_in(tab, world.owner.email)
    tab.goto("/sandboxes")
    held_until(tab, held, "status")
    tab.locator("a.sandbox-add").click()
    held_until(tab, held, "drawer")

    held["status"].continue_()
    tab.locator("[hx-trigger=load]").wait_for(state="detached")  # the status swapped in
    held["drawer"].continue_()
    dialog = tab.locator("#drawer-slot [role=dialog]")
    dialog.wait_for()
    tab.keyboard.press("Escape")
    dialog.wait_for(state="detached")
    assert tab.evaluate("document.activeElement.classList.contains('sandbox-add')")


def test_drawer_traps_focus_pushes_its_url_and_gives_focus_back(tab, world):
    sign_in(tab, world.owner.email)
    tab.goto("/sandboxes")
    list_title = tab.title()
    opener = tab.locator("a.sandbox-add")
    opener.click()
    dialog = tab.locator("#drawer-slot [role=dialog]")
    dialog.wait_for()
    tab.wait_for_url(re.compile(r"/sandboxes/new$"))
    assert tab.title() == "Add sandbox config · Sandlot"
    assert focus_inside(tab, "#drawer-slot [role=dialog]")
    for _ in range(60):  # more stops than the editor has: focus wraps, never leaves
        tab.keyboard.press("Tab")
        assert focus_inside(tab, "#drawer-slot [role=dialog]")
    for _ in range(5):
        tab.keyboard.press("Shift+Tab")
        assert focus_inside(tab, "#drawer-slot [role=dialog]")

    tab.keyboard.press("Escape")  # nothing typed: closes at once
    dialog.wait_for(state="detached")
    tab.wait_for_url(re.compile(r"/sandboxes$"))
    assert tab.title() == list_title
    assert tab.evaluate("document.activeElement.classList.contains('sandbox-add')")

    tab.go_back()  # the drawer's URL again: reloaded with the drawer open
    dialog.wait_for()
    assert tab.title() == "Add sandbox config · Sandlot"
    tab.go_back()
    tab.wait_for_url(re.compile(r"/sandboxes$"))
    dialog.wait_for(state="detached")

    tab.goto("/sandboxes/new")  # reload of a drawer URL shows the drawer, titled
    dialog.wait_for()
    assert tab.title() == "Add sandbox config · Sandlot"


def test_escape_over_unsaved_changes_asks_first_with_our_popover(tab, world, dialogs):
    sign_in(tab, world.owner.email)
    tab.goto("/sandboxes")
    tab.locator("a.sandbox-add").click()
    dialog = tab.locator("#drawer-slot [role=dialog]")
    dialog.get_by_label("Name").fill("Half typed")

    tab.keyboard.press("Escape")
    question = tab.locator(".popover[role=alertdialog]")
    question.wait_for()
    assert "Discard the changes" in question.inner_text()
    tab.screenshot(path=str(SHOTS / "drawer-discard-question-1280.png"))
    assert serious(tab) == []
    assert dialog.is_visible()
    assert focus_inside(tab, ".popover")
    for _ in range(4):  # the question keeps focus until answered
        tab.keyboard.press("Tab")
        assert focus_inside(tab, ".popover")
    question.get_by_role("button", name="Keep editing").click()
    question.wait_for(state="detached")
    assert dialog.get_by_label("Name").input_value() == "Half typed"

    tab.keyboard.press("Escape")
    question.get_by_role("button", name="Discard changes").click()
    dialog.wait_for(state="detached")
    tab.wait_for_url(re.compile(r"/sandboxes$"))
    assert dialogs == []


def test_confirmation_is_a_popover_anchored_to_its_button(tab, world, dialogs):
    sign_in(tab, world.owner.email)
    tab.goto("/api-keys")
    row = tab.locator("tr", has_text="Nightly evals")
    revoke = row.get_by_role("button", name="Revoke")
    revoke.click()
    question = tab.locator(".popover[role=alertdialog]")
    question.wait_for()
    assert "Revoke “Nightly evals”?" in question.inner_text()
    button, box = revoke.bounding_box(), question.bounding_box()
    below = abs(box["y"] - (button["y"] + button["height"])) <= 12
    above = abs(box["y"] + box["height"] - button["y"]) <= 12
    assert below or above, (button, box)
    assert box["x"] <= button["x"] + button["width"] and box["x"] + box["width"] >= button["x"]
    tab.screenshot(path=str(SHOTS / "confirm-popover-1280.png"))

    tab.keyboard.press("Escape")  # a "no": nothing is sent
    question.wait_for(state="detached")
    assert tab.evaluate("document.activeElement.textContent.trim()") == "Revoke"
    assert row.get_by_text("Active").is_visible()

    revoke.click()
    question.get_by_role("button", name="Revoke").click()
    row.get_by_text("Revoked").wait_for()
    assert dialogs == []


def test_escape_closes_the_workspace_switcher(tab, world):
    sign_in(tab, world.owner.email)
    switcher = tab.locator("details.switcher")
    switcher.locator("summary").click()
    assert switcher.get_attribute("open") is not None
    tab.keyboard.press("Escape")
    assert switcher.get_attribute("open") is None
    assert tab.evaluate("document.activeElement.tagName") == "SUMMARY"


@pytest.mark.parametrize("path", ["/members", "/api-keys"])
def test_tables_stack_into_labelled_rows_on_a_phone(tab, world, path):
    tab.set_viewport_size(PHONE)
    sign_in(tab, world.owner.email)
    tab.goto(path)
    cells = tab.locator("table.table tbody td")
    assert cells.count() >= 4
    rights = tab.evaluate(
        "() => [...document.querySelectorAll('table.table, table.table td')]"
        ".map(e => e.getBoundingClientRect().right)")
    assert max(rights) <= 390, rights
    labels = cells.evaluate_all("cells => cells.map(c => c.getAttribute('data-label'))")
    assert any(labels) and all(label is not None for label in labels), labels
    assert tab.evaluate("document.documentElement.scrollWidth") <= 390


def test_confirmation_popover_fits_a_phone(tab, world, dialogs):
    tab.set_viewport_size(PHONE)
    sign_in(tab, world.owner.email)
    tab.goto("/api-keys")
    revoke = tab.locator("tr", has_text="Nightly evals").get_by_role("button", name="Revoke")
    revoke.scroll_into_view_if_needed()
    revoke.click()
    question = tab.locator(".popover[role=alertdialog]")
    question.wait_for()
    box = question.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert box["y"] >= 0 and box["y"] + box["height"] <= 844, box
    tab.screenshot(path=str(SHOTS / "confirm-popover-390.png"))
    assert serious(tab) == []
    question.get_by_role("button", name="Cancel").click()
    question.wait_for(state="detached")
    assert dialogs == []


def test_phone_menu_opens_without_javascript(chromium, live_server, world):
    context = chromium.new_context(viewport=PHONE, base_url=live_server,
                                   java_script_enabled=False)
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        sign_in(page, world.owner.email)
        members = page.get_by_role("link", name="Members", exact=True)
        assert members.is_hidden()
        page.get_by_role("link", name="Menu").click()
        members.click()
        page.wait_for_url(re.compile(r"/members$"))
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()
