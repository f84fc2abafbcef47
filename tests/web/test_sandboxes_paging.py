"""The Sandboxes page at scale (issue 15 item 7): 50 cards a page by name, a filter box,
next-page links with a cursor bound to the workspace, tab and filter."""

from __future__ import annotations

import re

from tests.api.test_paging import add_configs


def names(html: str) -> list[str]:
    return re.findall(r'class="sandbox-name"[^>]*>([^<]+)<', html)


def test_first_page_is_50_cards_by_name_with_a_next_link(two_tenants, login_as):
    a, _ = two_tenants
    add_configs(a.tenant, 120)
    client = login_as(a.admin, a.tenant)
    html = client.get("/sandboxes").get_data(as_text=True)
    assert names(html) == [f"cfg-{i:04d}" for i in range(50)]
    assert "50 shown of 120" in html and "paging-secret" not in html
    link = re.search(r'href="(/sandboxes\?after=[^"]+)"', html).group(1).replace("&amp;", "&")
    second = client.get(link).get_data(as_text=True)
    assert names(second) == [f"cfg-{i:04d}" for i in range(50, 100)]
    assert "First page" in second
    third_link = re.search(r'href="(/sandboxes\?after=[^"]+)"', second).group(1)
    third = client.get(third_link.replace("&amp;", "&")).get_data(as_text=True)
    assert names(third) == [f"cfg-{i:04d}" for i in range(100, 120)]
    assert "Next 50" not in third


def test_filter_matches_name_or_description_and_counts_follow(two_tenants, login_as):
    a, _ = two_tenants
    add_configs(a.tenant, 60)
    client = login_as(a.admin, a.tenant)
    html = client.get("/sandboxes?q=CFG-001").get_data(as_text=True)
    assert names(html) == [f"cfg-{i:04d}" for i in range(10, 20)]
    assert 'value="CFG-001"' in html and "Next 50" not in html
    assert re.search(r'All<span class="count">10</span>', html)
    none = client.get("/sandboxes?q=100%25_").get_data(as_text=True)  # LIKE wildcards are text
    assert names(none) == [] and "No configs match" in none


def test_a_cursor_from_another_workspace_or_filter_starts_over(two_tenants, login_as):
    a, b = two_tenants
    add_configs(a.tenant, 60)
    add_configs(b.tenant, 60, start=500)
    html = login_as(a.admin, a.tenant).get("/sandboxes").get_data(as_text=True)
    link = re.search(r'href="(/sandboxes\?after=[^"]+)"', html).group(1).replace("&amp;", "&")
    foreign = login_as(b.admin, b.tenant).get(link).get_data(as_text=True)
    assert names(foreign) == [f"cfg-{i:04d}" for i in range(500, 550)]  # B's first page
    other_tab = login_as(a.admin, a.tenant).get(link + "&backend=e2b").get_data(as_text=True)
    assert names(other_tab) == []
    garbled = login_as(a.admin, a.tenant).get("/sandboxes?after=xyz").get_data(as_text=True)
    assert names(garbled)[0] == "cfg-0000"
