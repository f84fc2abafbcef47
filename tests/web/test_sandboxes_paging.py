"""The Sandboxes page at scale (issue 15 item 7): 50 cards a page by name, a filter box,
next-page links with a cursor bound to the workspace, tab and filter."""

from __future__ import annotations

import re

from app.extensions import db
from app.models import SandboxConfig
from tests.api.test_paging import add_configs


def names(html: str) -> list[str]:
    return re.findall(r'class="sandbox-name"[^>]*>([^<]+)<', html)


def test_first_page_is_50_cards_by_name_with_a_next_link(two_tenants, login_as):
    a, _ = two_tenants
    add_configs(a.tenant, 120)
    client = login_as(a.admin, a.tenant)
    html = client.get("/sandboxes").get_data(as_text=True)
    assert names(html) == [f"cfg-{i:04d}" for i in range(50)]
    assert "1–50 of 120" in html and "paging-secret" not in html
    assert "Previous 50" not in html and "First page" not in html
    link = re.search(r'href="(/sandboxes\?after=[^"]+)"', html).group(1).replace("&amp;", "&")
    second = client.get(link).get_data(as_text=True)
    assert names(second) == [f"cfg-{i:04d}" for i in range(50, 100)]
    assert "51–100 of 120" in second and "First page" in second
    third_link = re.search(r'href="(/sandboxes\?after=[^"]+)"', second).group(1)
    third = client.get(third_link.replace("&amp;", "&")).get_data(as_text=True)
    assert names(third) == [f"cfg-{i:04d}" for i in range(100, 120)]
    assert "101–120 of 120" in third and "Next 50" not in third


def before_link(html: str) -> str:
    return re.search(r'href="(/sandboxes\?before=[^"]+)"', html).group(1).replace("&amp;", "&")


def test_previous_links_walk_back_page_by_page(two_tenants, login_as):
    """From the last page, Previous gives 51-100 then 1-50 (keyset backwards, no offset);
    a config added in front meanwhile does not repeat or skip a card."""
    a, _ = two_tenants
    add_configs(a.tenant, 120)
    client = login_as(a.admin, a.tenant)
    html = client.get("/sandboxes").get_data(as_text=True)
    for _ in range(2):
        link = re.search(r'href="(/sandboxes\?after=[^"]+)"', html).group(1)
        html = client.get(link.replace("&amp;", "&")).get_data(as_text=True)
    assert "101–120 of 120" in html and "Previous 50" in html
    back = client.get(before_link(html)).get_data(as_text=True)
    assert names(back) == [f"cfg-{i:04d}" for i in range(50, 100)]
    assert "51–100 of 120" in back and "Next 50" in back and "First page" in back
    added = db.session.get(SandboxConfig, add_configs(a.tenant, 1, start=9000)[0])
    added.name = "aaa-9000"  # sorts before every other card
    db.session.commit()
    front = client.get(before_link(back)).get_data(as_text=True)
    assert names(front) == [f"cfg-{i:04d}" for i in range(0, 50)]
    assert "2–51 of 121" in front and "Previous 50" in front
    first = client.get(before_link(front)).get_data(as_text=True)
    assert names(first) == ["aaa-9000"] and "1–1 of 121" in first
    assert "Previous 50" not in first and "Next 50" in first


def test_a_before_cursor_of_another_filter_starts_over(two_tenants, login_as):
    a, _ = two_tenants
    add_configs(a.tenant, 120)
    client = login_as(a.admin, a.tenant)
    html = client.get("/sandboxes").get_data(as_text=True)
    link = re.search(r'href="(/sandboxes\?after=[^"]+)"', html).group(1).replace("&amp;", "&")
    second = client.get(link).get_data(as_text=True)
    other = client.get(before_link(second) + "&q=cfg").get_data(as_text=True)
    assert names(other)[0] == "cfg-0000" and "1–50 of 120" in other


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
