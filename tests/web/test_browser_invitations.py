"""The takeover story of issue 9, through the real pages in Chromium.

Before, workspace A's admin added a person with a password of their choosing; when
workspace B later added the same email, the account silently joined B and A's admin could
sign in there. Now: A's admin invites, the person chooses their own password on the accept
page, B's admin invites the same email and sees exactly what an unknown email gives, and
the person joins B only by accepting B's link while signed in. A's admin learns nothing.

Screenshots (desktop 1440x900 and phone 390x844) go to docs/screenshots/.
"""

from __future__ import annotations

import re

import pytest

from tests import factories
from tests.web.test_browser import SHOTS

pytestmark = pytest.mark.browser

PERSON = "riley@shared.test"
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def worlds():
    return factories.populate("Orbit Labs"), factories.populate("Harbor Co")


@pytest.fixture
def browse(chromium, live_server):
    contexts = []

    def open_tab(viewport=DESKTOP):
        context = chromium.new_context(viewport=viewport, base_url=live_server)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.on("dialog", lambda dialog: dialog.accept())
        return page

    yield open_tab
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{name}: horizontal scroll ({width}px)"


def sign_in(page, email: str, password: str = factories.PASSWORD) -> None:
    page.goto("/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/$"))


def invite(page, email: str, role: str = "viewer", screenshot: str | None = None) -> str:
    page.goto("/members")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Role", exact=True).select_option(role)
    page.get_by_role("button", name="Create invitation").click()
    link = page.locator("#new-invite-link").inner_text()
    if screenshot:
        shot(page, screenshot)
    return link


def answer_of(page) -> str:
    """The invitation box as the admin sees it, with the email and link blanked."""
    box = page.locator(".secret-box").inner_text()
    return re.sub(r"\S+@\S+|http\S+", "*", box)


@pytest.mark.console_errors("status of 401", "status of 410")  # refused on purpose
def test_two_workspaces_cannot_take_over_an_account(browse, worlds):
    orbit, harbor = worlds
    admin_a = browse()
    sign_in(admin_a, orbit.admin.email)
    link_a = invite(admin_a, PERSON, screenshot="members-invite.png")
    assert "/invite/" in link_a
    admin_a.locator("#invitations-table tr", has_text=PERSON).get_by_text("Pending").wait_for()

    # The person opens A's link, signed out: both choices, nothing about whether they exist.
    person = browse()
    person.goto(link_a)
    person.get_by_role("heading", name="Join Orbit Labs").wait_for()
    shot(person, "invitation-accept.png")
    person.get_by_label("Choose a password").fill("riley-own-password")
    person.get_by_label("Repeat the password").fill("riley-own-password")
    person.get_by_role("button", name="Create account and join").click()
    person.wait_for_url(re.compile(r"/$"))
    person.get_by_text("You joined Orbit Labs as viewer.").wait_for()

    # B's admin invites the same email: the answer is the one an unknown email gets.
    admin_b = browse()
    sign_in(admin_b, harbor.admin.email)
    invite(admin_b, "never-seen@nowhere.test")
    unknown = answer_of(admin_b)
    link_b = invite(admin_b, PERSON)
    assert answer_of(admin_b) == unknown
    members_b = admin_b.locator("#members-table").inner_text()
    assert PERSON not in members_b  # no consent yet, no membership

    # A's admin cannot sign in as the person, and sees nothing of B.
    guess = browse()
    guess.goto("/login")
    guess.get_by_label("Email").fill(PERSON)
    guess.get_by_label("Password").fill(factories.PASSWORD)
    guess.get_by_role("button", name="Sign in").click()
    guess.get_by_text("Email or password is incorrect.").wait_for()
    admin_a.goto("/members")
    assert "Harbor" not in admin_a.content()

    # Opened by someone else who is signed in, B's link is refused.
    admin_a.goto(link_b)
    admin_a.get_by_text(f"You are signed in as {orbit.admin.email}").wait_for()
    assert admin_a.get_by_role("button", name="Join Harbor Co").count() == 0

    # The person, signed in, accepts B's link with one button.
    person.goto(link_b)
    person.get_by_role("button", name="Join Harbor Co").click()
    person.wait_for_url(re.compile(r"/$"))
    person.get_by_text("You joined Harbor Co as viewer.").wait_for()
    admin_b.goto("/members")
    admin_b.locator("#members-table tr", has_text=PERSON).wait_for()
    admin_b.locator("#invitations-table tr", has_text=PERSON).get_by_text("Accepted").wait_for()

    # Used links are refused with a clear page; A's admin still learns nothing about B.
    person.goto(link_b)
    person.get_by_text("This invitation was already used.").wait_for()
    shot(person, "invitation-used.png")
    admin_a.goto("/members")
    admin_a.goto("/")
    assert "Harbor" not in admin_a.content()


def test_invitation_pages_fit_a_phone(browse, worlds):
    orbit, _ = worlds
    admin = browse(PHONE)
    sign_in(admin, orbit.admin.email)
    link = invite(admin, PERSON, screenshot="members-invite-390.png")
    visitor = browse(PHONE)
    visitor.goto(link)
    visitor.get_by_role("heading", name="Join Orbit Labs").wait_for()
    shot(visitor, "invitation-accept-390.png")
