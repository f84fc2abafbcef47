"""Issue 27 item 10 in Chromium at 1440x900 and 390x844: the members page offers no role that
is "the same as a viewer for now" (contributor has a viewer's rights in Sandlot: no route
asks for it, and any member may run sessions, decisions 7), says what each role it offers
may do, and no placeholder looks like a value already filled in.

Screenshots: docs/screenshots/roles-invite-{1440,390}.png."""

from __future__ import annotations

import pytest

from tests import factories
from tests.web.test_browser import SHOTS, sign_in
from tests.web.test_browser_members import browse  # noqa: F401 - the fixture

pytestmark = pytest.mark.browser
SIZES = [({"width": 1440, "height": 900}, "1440"), ({"width": 390, "height": 844}, "390")]


@pytest.fixture
def world() -> factories.TenantUsers:
    return factories.populate("Orbit Labs")


def placeholders(page) -> list[str]:
    return page.eval_on_selector_all("input[placeholder], textarea[placeholder]",
                                     "(els) => els.map((e) => e.placeholder)")


@pytest.mark.parametrize("viewport,size", SIZES)
def test_the_invite_form_offers_roles_that_differ_and_says_what_they_do(browse, world,  # noqa: F811
                                                                         viewport, size):
    page = browse(viewport)
    sign_in(page, world.owner.email)
    page.goto("/members")
    role = page.get_by_label("Role", exact=True)
    offered = role.locator("option").all_inner_texts()
    assert offered == ["Viewer", "Admin", "Owner"]
    help_id = role.get_attribute("aria-describedby")
    help_text = page.locator(f"#{help_id}").inner_text()
    assert "Viewer: Sees the sandbox configs and skills, runs commands" in help_text
    assert "Admin: Also adds, changes and deletes" in help_text
    assert "for now" not in page.content()
    # A member's row offers no move to a role that changes nothing but the label either.
    for person in (world.viewer, world.contributor):
        choices = page.locator("#members-table tr", has_text=person.email) \
            .locator("select option").all_inner_texts()
        assert "Make contributor" not in choices and choices, choices
    # The contributor they already are still reads as such.
    page.locator("#members-table tr", has_text=world.contributor.email) \
        .locator(".badge-contributor").wait_for()
    assert all(p.startswith(("e.g. ", "Search ")) for p in placeholders(page)), \
        placeholders(page)
    page.get_by_label("Email").scroll_into_view_if_needed()
    page.mouse.move(0, 0)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"roles-invite-{size}.png"))
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # The dashboard of a contributor says plainly that it is a viewer's rights.
    contributor = browse(viewport)
    sign_in(contributor, world.contributor.email)
    words = contributor.get_by_role("region", name="At a glance").inner_text()
    assert "The same as a viewer in Sandlot" in words and "for now" not in words


@pytest.mark.parametrize("viewport,size", SIZES)
def test_placeholders_read_as_examples(browse, world, viewport, size):  # noqa: F811
    page = browse(viewport)
    sign_in(page, world.admin.email)
    for path in ("/egress", "/personal-variables", "/sandboxes/new?backend=docker",
                 "/sandboxes/new?backend=e2b", "/sandboxes/new?backend=cube"):
        page.goto(path)
        for text in filter(None, placeholders(page)):  # an empty one shows nothing
            assert text.startswith(("e.g. ", "Search ", "Filter ", "Why ", "New value",
                                    "default ", "deployment default", "an image",
                                    "template id", "runc (default)")), (path, text)
