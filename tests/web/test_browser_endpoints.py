"""The editor's connection section in headless Chromium (issue 9 item 3): a Docker config
picks one of the operator's engines by name, and the private-endpoint switch appears only
where the operator allows private endpoints. Leaves sandbox-engine*.png and
sandbox-private-endpoints*.png at 1440x900 and 390x844."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from tests import factories
from tests.web.test_browser import shot, sign_in

pytestmark = pytest.mark.browser

SIZES = {"": {"width": 1440, "height": 900}, "-mobile": {"width": 390, "height": 844}}
ENGINES = {"local": {"url": "unix:///var/run/docker.sock"},
           "gpu-pool": {"url": "tcp://10.9.8.7:2376", "tls_dir": "/etc/sandlot/gpu"}}


@contextmanager
def page_at(chromium, live_server, size):
    context = chromium.new_context(viewport=size, base_url=live_server)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        yield page
    finally:
        context.close()


def no_horizontal_scroll(page) -> None:
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), \
        "the page scrolls sideways"


@pytest.fixture
def admin(app, monkeypatch):
    monkeypatch.setitem(app.config, "SANDBOX_DOCKER_ENGINES", ENGINES)
    return factories.populate("Acme Research")


@pytest.mark.parametrize("suffix", SIZES)
def test_a_docker_config_picks_one_of_the_operators_engines(chromium, live_server, admin,
                                                            suffix):
    with page_at(chromium, live_server, SIZES[suffix]) as page:
        sign_in(page, admin.admin.email)
        page.goto("/sandboxes/new?backend=docker")
        drawer = page.locator(".drawer")
        engine = drawer.get_by_label("Engine", exact=True)
        engine.wait_for()

        options = engine.locator("option").all_inner_texts()
        assert options == ["gpu-pool", "local"]
        assert drawer.get_by_label("Engine host").count() == 0
        assert drawer.get_by_label("TLS directory").count() == 0
        # The operator's addresses and paths are not shown to tenants.
        text = drawer.inner_text()
        assert "10.9.8.7" not in text and "/etc/sandlot" not in text
        assert "docker.sock" not in drawer.inner_html()
        engine.select_option("gpu-pool")
        engine.scroll_into_view_if_needed()
        no_horizontal_scroll(page)
        page.mouse.move(0, 0)
        shot(page, f"sandbox-engine{suffix}.png")


@pytest.mark.parametrize("suffix", SIZES)
def test_the_private_endpoint_switch_follows_the_operator(chromium, live_server, admin, app,
                                                          monkeypatch, suffix):
    with page_at(chromium, live_server, SIZES[suffix]) as page:
        sign_in(page, admin.admin.email)
        monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", False)
        page.goto("/sandboxes/new?backend=e2b")
        drawer = page.locator(".drawer")
        note = drawer.get_by_text("private and loopback addresses are not allowed by the "
                                  "operator")
        note.wait_for()
        assert drawer.get_by_label("Allow private endpoints").count() == 0
        note.scroll_into_view_if_needed()
        no_horizontal_scroll(page)
        page.mouse.move(0, 0)
        shot(page, f"sandbox-private-endpoints{suffix}.png")

        monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
        page.goto("/sandboxes/new?backend=e2b")
        page.locator(".drawer").get_by_text("Allow private endpoints").wait_for()
        assert "never reachable" in page.locator(".drawer").inner_text()
