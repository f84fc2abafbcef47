"""The API keys page with 120 keys in headless Chromium: 50 rows a page, Next and
Previous through htmx, on desktop and phone (no sideways scroll), with screenshots."""

from __future__ import annotations

import re

import pytest

from tests import factories
from tests.web.test_api_keys import add_keys
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]

SIZES = {"": {"width": 1440, "height": 900}, "-mobile": {"width": 390, "height": 844}}


@pytest.mark.parametrize("suffix", SIZES)
def test_120_keys_page_by_page(tab, suffix):
    group = factories.populate("Acme Research")
    add_keys(group.tenant, 120)
    tab.set_viewport_size(SIZES[suffix])
    sign_in(tab, group.admin.email)
    tab.goto("/api-keys")
    rows = tab.locator("#api-keys-table tbody tr")
    assert rows.count() == 50
    tab.get_by_text("1–50 of 120").wait_for()
    tab.get_by_role("link", name="Next").click()
    tab.wait_for_url(re.compile(r"page=2"))
    tab.get_by_text("51–100 of 120").wait_for()
    assert rows.count() == 50 and "key-119" not in tab.locator("#api-keys-table").inner_text()
    tab.mouse.move(0, 0)
    tab.locator("#api-keys-table .pager").scroll_into_view_if_needed()
    shot(tab, f"api-keys-pager{suffix}.png")
    assert tab.evaluate("document.documentElement.scrollWidth") <= SIZES[suffix]["width"]
    tab.get_by_role("link", name="Previous").click()
    tab.get_by_text("1–50 of 120").wait_for()
    tab.locator("#api-keys-table", has_text="key-119").wait_for()
