"""The dashboard's Warm pools panel in headless Chromium (issue 29 item 2): a pool that is
filling says so and the panel follows it to ready by itself; the config editor offers the
pool's size. axe, the phone layout and screenshots at 1440x900 and 390x844."""

from __future__ import annotations

import pytest

from app.services import audit
from app.services.sandboxes import configs, pools
from app.services.sessions import lifecycle as sessions
from tests import factories
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.web.test_a11y import PHONE, overflow, serious
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]


@pytest.fixture
def workspace():
    require_docker()
    group = factories.populate("Acme Research")
    config = configs.create_config(group.tenant, audit.SystemActor("tests"), "Data science", "",
                                   factories.config_doc("docker", {
                                       "image": BASE_IMAGE, "network_mode": "none",
                                       "warm_pool_size": 2}))
    sessions.create_session(group.tenant, group.contributor, config.id, "Analysis")
    return group, config


@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, PHONE],
                         ids=["1440", "390"])
def test_the_pool_panel_follows_a_filling_pool_to_ready(tab, workspace, viewport):
    group, config = workspace
    tab.set_viewport_size(viewport)
    sign_in(tab, group.admin.email)
    panel = tab.locator("#pools-panel")
    line = panel.locator(".dash-line", has_text="Data science")
    assert "Filling" in line.inner_text() and "0 of 2 ready" in line.inner_text()
    pools.tend()
    pools.tend()  # two sandboxes started, one per pass
    line.get_by_text("Ready", exact=True).wait_for(timeout=10_000)  # the panel polls itself
    assert "2 of 2 ready" in line.inner_text()
    assert serious(tab) == [] and overflow(tab) <= 0
    panel.scroll_into_view_if_needed()
    tab.mouse.move(0, 0)
    shot(tab, f"dashboard-pools-{viewport['width']}.png")


@pytest.mark.console_errors("status of 400", "Error Code 400")  # the refused size
def test_the_editor_offers_the_pool_size(tab, workspace):
    group, config = workspace
    sign_in(tab, group.admin.email)
    tab.goto("/sandboxes")
    tab.locator(".sandbox-card", has_text="Data science").get_by_role("link").first.click()
    drawer = tab.locator(".drawer")
    field = drawer.get_by_label("Warm pool")
    assert field.input_value() == "2"
    assert "kept ready" in drawer.locator("#f-docker-warm_pool_size-help").inner_text()
    field.fill("9")
    drawer.get_by_role("button", name="Save").click()
    drawer.get_by_text("a warm pool may keep at most 4 sandboxes").wait_for()
