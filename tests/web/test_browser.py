"""Journeys through the console in headless Chromium, against the live server.

Each journey leaves a screenshot in docs/screenshots/ (1280x800) for the README and review.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.models import Role
from app.services import audit
from app.services.identity import api_keys, invitations
from tests import factories
from tests.web._support import confirm

pytestmark = pytest.mark.browser

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
WORKSPACE = "Acme Research"
KEY_TEXT = re.compile(r"sl_[0-9a-f]{8}_[A-Za-z0-9_\-]{20,}")


@pytest.fixture
def page(chromium, live_server):
    context = chromium.new_context(viewport={"width": 1280, "height": 800}, base_url=live_server,
                                  permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm
    yield page
    context.close()


@pytest.fixture
def world() -> factories.TenantUsers:
    """A workspace with its four roles and some history; rows are committed (the server
    reads them from its own connections)."""
    group = factories.populate(WORKSPACE)
    factories.make_user(group.admin.email, factories.make_tenant("Acme Labs"), Role.viewer)
    owner = audit.SystemActor(group.owner.email)
    invitation, _ = invitations.create_invitation(group.tenant, owner, Role.owner,
                                                  "sam@acme-research.test", Role.contributor)
    invitations.accept_as_new(invitation, factories.PASSWORD)
    api_keys.create_key(group.tenant, owner, name="Nightly evals", full_access=True,
                        capabilities=[], expires_at=None, pepper=factories.PEPPER)
    return group


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name))


def sign_in(page, email: str, *, screenshot: str | None = None) -> None:
    page.goto("/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(factories.PASSWORD)
    if screenshot:
        shot(page, screenshot)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))


def test_login_journey_lands_on_the_dashboard(page, world):
    sign_in(page, world.admin.email, screenshot="login.png")
    assert page.locator("h1").inner_text() == WORKSPACE
    assert page.locator(".switcher-current").inner_text() == WORKSPACE
    page.get_by_text("joined as contributor by invitation").wait_for()
    shot(page, "dashboard.png")


def test_admin_invites_a_member_and_changes_a_role(page, world):
    sign_in(page, world.admin.email)
    page.get_by_role("link", name="Members", exact=True).click()
    page.wait_for_url(re.compile(r"/members$"))
    page.get_by_label("Email").fill("dana@acme-research.test")
    page.get_by_label("Role", exact=True).select_option("viewer")
    page.get_by_role("button", name="Create invitation").click()
    link = page.locator("#new-invite-link").inner_text()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/invite/[A-Za-z0-9_-]{40,}", link)
    page.locator("#invitations-table tr", has_text="dana@acme-research.test") \
        .get_by_text("Pending").wait_for()
    assert page.get_by_label("Email").input_value() == ""  # a fresh form after success

    viewer_row = page.locator("tr", has_text=world.viewer.email)
    viewer_row.locator("select").select_option("admin")
    viewer_row.get_by_text("will also be able to").wait_for()  # asked first, in the row
    viewer_row.get_by_role("button", name="Make admin").click()
    page.locator("tr", has_text=world.viewer.email).locator(".badge-admin").wait_for()
    page.get_by_text(f"{world.viewer.email} is now admin.").wait_for()
    shot(page, "members.png")


def test_admin_creates_an_api_key_and_sees_it_once(page, world):
    sign_in(page, world.admin.email)
    page.goto("/api-keys")
    page.get_by_label("Name").fill("Agent runner")
    page.get_by_label("Full access").check()
    page.get_by_role("button", name="Create key").click()
    secret = page.locator("#new-key-value")
    secret.wait_for()
    plaintext = secret.inner_text().strip()
    assert KEY_TEXT.fullmatch(plaintext)
    page.get_by_text("It will not be shown again.").wait_for()
    shot(page, "api-keys.png")
    page.get_by_role("button", name="Copy").click()
    page.get_by_role("button", name="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == plaintext

    page.reload()
    page.locator("tr", has_text="Agent runner").wait_for()
    assert plaintext not in page.content()
    assert page.locator("#new-key-value").count() == 0

    page.locator("tr", has_text="Agent runner").get_by_role("button", name="Revoke").click()
    assert confirm(page).startswith("Revoke “Agent runner”?")
    page.locator("tr", has_text="Agent runner").get_by_text("Revoked").wait_for()


def test_admin_exports_the_audit_log(page, world):
    sign_in(page, world.admin.email)
    page.get_by_role("button", name="Export audit log").click()
    page.locator(".job-succeeded").wait_for()
    link = page.get_by_role("link", name="Download CSV")
    link.wait_for()
    shot(page, "dashboard-export.png")
    with page.expect_download() as download_info:
        link.click()
    content = Path(download_info.value.path()).read_text()
    assert content.startswith("id,created_at,actor,action")
    assert "invitation.accepted" in content and "api_key.created" in content


def test_workspace_switcher_moves_to_another_workspace(page, world):
    sign_in(page, world.admin.email)
    page.locator(".switcher summary").click()
    page.get_by_role("button", name="Acme Labs").click()
    page.get_by_text("Switched to Acme Labs.").wait_for()
    assert page.locator("h1").inner_text() == "Acme Labs"
    assert page.get_by_role("link", name="Members", exact=True).count() == 0  # a viewer there


def test_viewer_sees_no_admin_navigation(page, world):
    sign_in(page, world.viewer.email)
    assert page.get_by_role("link", name="Members", exact=True).count() == 0
    assert page.get_by_role("button", name="Export audit log").count() == 0
    assert page.get_by_role("link", name="Sandboxes", exact=True).count() == 1
    assert page.get_by_role("link", name="Playground", exact=True).count() == 1
    assert page.get_by_role("link", name="Skills", exact=True).count() == 1
    assert page.get_by_role("link", name="Personal variables", exact=True).count() == 1
    assert page.locator(".nav-item.is-disabled").count() == 0
