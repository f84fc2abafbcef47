"""Issue 27 items 7 and 12 in Chromium at 1440x900 and 390x844: the dashboard's four
figures are a compact row on a phone (not four screens of cards), a table shown as cards
on a phone names each value once ("Joined 1 Dec 2026", not "JOINED / Joined 1 Dec 2026"),
table dates are in the viewer's time zone (also after an htmx swap), and the sidebar's
truncated email can be read in full.

Screenshots: docs/screenshots/compact-{dashboard,members}-{1440,390}.png."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.extensions import db
from app.models import Membership, Role
from tests import factories
from tests.web.test_browser import SHOTS, sign_in
from tests.web.test_browser_members import browse  # noqa: F401 - the fixture
from tests.web.test_dashboard import workspace

pytestmark = pytest.mark.browser
SIZES = [({"width": 1440, "height": 900}, "1440"), ({"width": 390, "height": 844}, "390")]
# 20:30 UTC on 1 Dec is 05:30 on 2 Dec in Tokyo: a UTC page would say 1 Dec.
JOINED = datetime(2026, 12, 1, 20, 30, tzinfo=UTC)

# How many labels a cell shows: its column's name drawn before it (data-label) and any
# words of its own that only show when stacked (.stacked-only).
LABELS = """(cell) => {
  const before = getComputedStyle(cell, '::before').content;
  const drawn = before && before !== 'none' && before !== 'normal' && before !== '""' ? 1 : 0;
  const own = [...cell.querySelectorAll('.stacked-only')]
    .filter((s) => getComputedStyle(s).display !== 'none').length;
  return drawn + own;
}"""


@pytest.fixture
def world() -> factories.TenantUsers:
    group = factories.populate("Orbit Labs")
    workspace(group, 2)
    membership = db.session.query(Membership).filter_by(
        tenant_id=group.tenant.id, user_id=group.viewer.id).one()
    membership.created_at = JOINED
    db.session.commit()
    factories.make_invitation(group.tenant, "riley@orbit.test", Role.viewer)
    return group


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.mouse.move(0, 0)
    page.screenshot(path=str(SHOTS / name))
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), name


@pytest.mark.parametrize("viewport,size", SIZES)
def test_the_dashboard_figures_are_a_compact_row(browse, world, viewport, size):  # noqa: F811
    page = browse(viewport)
    sign_in(page, world.admin.email)
    stats = page.get_by_role("region", name="At a glance")
    cards = stats.locator(".stat")
    assert cards.count() == 4
    tops = [round(cards.nth(i).bounding_box()["y"]) for i in range(4)]
    height = stats.bounding_box()["height"]
    if size == "390":
        # Three figures side by side, the members card (with the role's words) under them;
        # the whole glance well within one screen.
        assert tops[0] == tops[1] == tops[2] < tops[3], tops
        assert height < 0.45 * viewport["height"], height
    else:
        assert len(set(tops)) == 1, tops
    for label in ("Sandbox configs", "Open sessions", "Skills in the catalog", "Members"):
        assert stats.get_by_text(label, exact=True).is_visible()
    shot(page, f"compact-dashboard-{size}.png")


@pytest.mark.parametrize("viewport,size", SIZES)
def test_card_rows_label_each_value_once_and_dates_are_local(browse, world, viewport, size):  # noqa: F811
    page = browse(viewport, timezone_id="Asia/Tokyo", locale="en-GB")
    sign_in(page, world.owner.email)
    page.goto("/members")
    row = page.locator("#members-table tr", has_text=world.viewer.email)
    joined = row.locator("time")
    assert joined.inner_text() == "2 Dec 2026"  # the viewer's day in Tokyo, not UTC's
    assert joined.get_attribute("datetime").startswith("2026-12-01T20:30")
    cells = page.locator("#members-table tbody td:not(.col-actions), "
                         "#invitations-table tbody td:not(.col-actions)")
    counts = [cells.nth(i).evaluate(LABELS) for i in range(cells.count())]
    assert max(counts) <= 1, counts  # never a label twice
    when = row.locator("td", has=page.locator("time"))
    expected = 1 if size == "390" else 0  # a card names its date; a table has its header
    assert when.evaluate(LABELS) == expected
    if size == "390":
        assert when.inner_text() == "Joined 2 Dec 2026"
    row.scroll_into_view_if_needed()
    shot(page, f"compact-members-{size}.png")

    # After an htmx swap (the members table comes back) the dates are local again.
    row.locator("select").select_option("admin")
    row.get_by_role("button", name="Make admin").click()
    page.get_by_text(f"{world.viewer.email} is now admin.").wait_for()
    row = page.locator("#members-table tr", has_text=world.viewer.email)
    assert row.locator("time").inner_text() == "2 Dec 2026"


@pytest.mark.parametrize("viewport,size", SIZES)
def test_the_sidebar_email_can_be_read_in_full(browse, world, viewport, size):  # noqa: F811
    page = browse(viewport)
    sign_in(page, world.contributor.email)
    if size == "390":
        page.get_by_role("button", name="Menu").click()
    email = page.locator(".sidebar .user-email")
    email.wait_for()
    assert email.get_attribute("title") == world.contributor.email
    # Nothing is cut off: the whole address is on screen (it wraps instead of an ellipsis).
    assert email.evaluate("(e) => e.scrollWidth <= e.clientWidth")
    assert email.inner_text() == world.contributor.email
    shot(page, f"compact-sidebar-{size}.png")
