"""Issue 15 items 5 and 6 in Chromium: the members page (search, pages, a role change that
asks first, the only owner offered nothing) and the dashboard, at 1440x900 and 390x844.

Screenshots go to docs/screenshots/ (members-page-*, members-confirm-*, dashboard-summary-*).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from app.models import Role
from tests import factories
from tests.web.test_browser import SHOTS
from tests.web.test_dashboard import workspace
from tests.web.test_members_page import add_members

pytestmark = pytest.mark.browser

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def world() -> factories.TenantUsers:
    group = factories.populate("Orbit Labs")
    add_members(group.tenant, 120)
    factories.make_invitation(group.tenant, "riley@orbit.test", Role.contributor)
    workspace(group, 2)
    return group


@pytest.fixture
def browse(chromium, live_server):
    contexts = []

    def open_tab(viewport, **options):  # options: new_context's, e.g. timezone_id
        context = chromium.new_context(viewport=viewport, base_url=live_server, **options)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        return page

    yield open_tab
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{name}: horizontal scroll ({width}px)"


def sign_in(page, email: str) -> None:
    page.goto("/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(factories.PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))


def rows(page):
    return page.locator("#members-table tbody tr")


@pytest.mark.parametrize("viewport,size", [(DESKTOP, "1440"), (PHONE, "390")])
def test_members_search_pages_and_a_confirmed_role_change(browse, world, viewport, size):
    page = browse(viewport)
    sign_in(page, world.owner.email)
    page.goto("/members")
    assert rows(page).count() == 50
    page.get_by_text("1–50 of 124").wait_for()
    page.locator("#invitations-table tr", has_text="riley@orbit.test").get_by_text("Pending") \
        .wait_for()
    shot(page, f"members-page-{size}.png")

    page.get_by_role("link", name="Next").click()
    page.get_by_text("51–100 of 124").wait_for()
    assert re.search(r"page=2", page.url)

    page.get_by_label("Search members").fill("orbit-labs")
    owner_row = page.locator("tr", has_text=world.owner.email)
    owner_row.get_by_text("Only owner").wait_for()
    assert rows(page).count() == 4
    assert owner_row.locator("select").count() == 0  # the only owner: no demotion offered
    assert owner_row.get_by_role("button", name="Remove").count() == 0

    page.get_by_label("Search members").fill("member-07")
    page.get_by_text("member-079@crowd.test").wait_for()
    page.wait_for_function("document.querySelectorAll('#members-table tbody tr').length == 10")
    assert "q=member-07" in page.url

    row = page.locator("tr", has_text="member-071@crowd.test")
    row.locator("select").select_option("admin")
    row.get_by_text("Make member-071@crowd.test an admin?").wait_for()
    row.get_by_text("invite, re-role and remove members").wait_for()
    assert row.locator(".badge-viewer").count() == 1  # nothing changed yet
    shot(page, f"members-confirm-{size}.png")
    row.get_by_role("link", name="Cancel").click()
    row.locator("select").wait_for()

    row.locator("select").select_option("admin")
    row.get_by_role("button", name="Make admin").wait_for()
    row.get_by_role("button", name="Make admin").click()
    page.get_by_text("member-071@crowd.test is now admin.").wait_for()
    page.locator("tr", has_text="member-071@crowd.test").locator(".badge-admin").wait_for()
    assert rows(page).count() == 10  # the search survived the change


@pytest.mark.parametrize("viewport,size", [(DESKTOP, "1440"), (PHONE, "390")])
def test_the_dashboard_summarises_and_links(browse, world, viewport, size):
    page = browse(viewport)
    sign_in(page, world.admin.email)
    page.get_by_role("heading", name="Sandbox configs by backend").wait_for()
    page.get_by_text("2 with problems").wait_for()
    page.get_by_role("link", name="broken-0").wait_for()
    shot(page, f"dashboard-summary-{size}.png")
    quotas = page.get_by_role("heading", name="Quotas")
    quotas.scroll_into_view_if_needed()
    assert page.locator(".quota-line").count() == 6
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, f"dashboard-quotas-{size}.png")
    page.get_by_role("link", name="E2B", exact=True).click()
    page.wait_for_url(re.compile(r"/sandboxes\?backend=e2b$"))
    page.go_back()
    page.get_by_role("link", name="Check found problems").first.click()
    page.wait_for_url(re.compile(r"/sandboxes/checks/[0-9a-f-]{36}$"))


# Set on the page before a search: the moment htmx puts the results in, pick a new role in
# member-071's row, as the fastest person (or a script) could. Mutation observers run right
# after the swap's own task, before any timer.
PICK_ON_ARRIVAL = """() => {
  window.picked = false;
  new MutationObserver((records) => {
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (window.picked || !(node instanceof Element)) continue;
        const row = [...node.querySelectorAll("tr")]
          .find((tr) => tr.textContent.includes("member-071@crowd.test"));
        const select = row && row.querySelector("select");
        if (!select) continue;
        window.picked = true;
        select.value = "admin";
        select.dispatchEvent(new Event("change", { bubbles: true }));
      }
    }
  }).observe(document.body, { childList: true, subtree: true });
}"""


def test_a_swapped_in_row_answers_at_once(browse, world):
    """htmx wires new content when a swap settles; with a settle delay, a pick made as the row
    arrives was lost (no request, no question). Our settle delay is zero, so a row is live
    the moment it is in the page."""
    page = browse(DESKTOP)
    sign_in(page, world.owner.email)
    page.goto("/members")
    page.evaluate(PICK_ON_ARRIVAL)
    page.get_by_label("Search members").fill("member-071")
    expect(rows(page)).to_have_count(1)
    assert page.evaluate("() => window.picked") is True
    row = page.locator("tr", has_text="member-071@crowd.test")
    row.get_by_role("button", name="Make admin").wait_for(timeout=5_000)
