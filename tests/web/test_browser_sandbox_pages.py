"""The Sandboxes page with 120 configs in headless Chromium: 50 cards, the next page, and
the filter box (htmx keeps focus while typing), on desktop and phone, with screenshots."""

from __future__ import annotations

import re

import pytest

from tests import factories
from tests.api.test_paging import add_configs
from tests.web.test_browser import shot, sign_in
from tests.web.test_browser_dialogs import held_until

pytestmark = [pytest.mark.browser]

SIZES = {"": {"width": 1440, "height": 900}, "-mobile": {"width": 390, "height": 844}}


@pytest.mark.parametrize("suffix", SIZES)
def test_pages_and_filter_box(tab, suffix):
    group = factories.populate("Acme Research")
    add_configs(group.tenant, 120)
    tab.set_viewport_size(SIZES[suffix])
    sign_in(tab, group.admin.email)
    tab.goto("/sandboxes")
    cards = tab.locator(".sandbox-card")
    assert cards.count() == 50
    tab.get_by_text("1–50 of 120").wait_for()
    assert tab.evaluate("document.documentElement.scrollWidth") <= SIZES[suffix]["width"]

    tab.get_by_role("link", name="Next 50").click()
    tab.wait_for_url(re.compile(r"after="))
    tab.locator(".sandbox-card", has_text="cfg-0050").wait_for()
    assert cards.count() == 50 and "cfg-0000" not in tab.locator("#sandbox-list").inner_text()
    tab.get_by_text("51–100 of 120").wait_for()
    tab.mouse.move(0, 0)
    tab.locator(".list-pager").scroll_into_view_if_needed()
    shot(tab, f"sandboxes-pager{suffix}.png")  # First page, Previous 50 and Next 50
    assert tab.evaluate("document.documentElement.scrollWidth") <= SIZES[suffix]["width"]
    tab.get_by_role("link", name="Previous 50").click()
    tab.wait_for_url(re.compile(r"before="))
    tab.locator(".sandbox-card", has_text="cfg-0000").wait_for()
    tab.get_by_text("1–50 of 120").wait_for()
    tab.get_by_role("link", name="Next 50").click()
    tab.get_by_text("51–100 of 120").wait_for()
    tab.get_by_role("link", name="First page").click()
    tab.locator(".sandbox-card", has_text="cfg-0000").wait_for()

    box = tab.get_by_label("Filter sandbox configs by name or description")
    box.click()
    box.press_sequentially("cfg-011", delay=40)
    tab.wait_for_url(re.compile(r"q=cfg-011"))
    tab.get_by_text("cfg-0119").wait_for()
    assert cards.count() == 10
    assert tab.evaluate("document.activeElement.id") == "sandbox-filter"  # typing goes on
    assert box.input_value() == "cfg-011"
    box.fill("")
    tab.get_by_role("link", name="Next 50").wait_for()
    tab.mouse.move(0, 0)
    shot(tab, f"sandboxes-paged{suffix}.png")
    assert tab.evaluate("document.documentElement.scrollWidth") <= SIZES[suffix]["width"]


@pytest.mark.console_errors("htmx:sendAbort", "htmx:afterRequest")  # the held answer
def test_what_is_typed_while_a_filter_answer_is_in_flight_is_kept_and_asked_for(tab):
    # A slow answer (a loaded server) to the first words typed must not reset the box or
    # drop the request for what was typed since: it failed a fresh-clone CI run, the box
    # back at "cfg-01" and the page never asking for "cfg-011".
    group = factories.populate("Acme Research")
    add_configs(group.tenant, 120)
    held: dict = {}
    tab.route(re.compile(r".*/sandboxes\?q=cfg-01$"),
              lambda route: held.setdefault("first", route))
    sign_in(tab, group.admin.email)
    tab.goto("/sandboxes")
    box = tab.get_by_label("Filter sandbox configs by name or description")
    box.click()
    box.press_sequentially("cfg-01")
    held_until(tab, held, "first")  # asked for "cfg-01"; no answer yet

    box.press_sequentially("1")
    tab.wait_for_timeout(400)  # past the filter's 300 ms pause, so it asks again
    held["first"].continue_()

    tab.wait_for_url(re.compile(r"q=cfg-011"))
    tab.get_by_text("cfg-0119").wait_for()
    assert tab.locator(".sandbox-card").count() == 10
    assert box.input_value() == "cfg-011"
    assert tab.evaluate("document.activeElement.id") == "sandbox-filter"
