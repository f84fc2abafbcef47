"""Issue 14 item 5 in the browser: after the only key is replaced, the Sandboxes page
still works, its card says secrets need re-entry, the editor marks each lost secret, and
typing them again repairs the config. Screenshots at 1440x900 and 390x844."""

from __future__ import annotations

import re

import pytest

from app.extensions import db
from app.models import SandboxConfig
from app.services import audit
from app.services.sandboxes import configs as service
from tests import factories
from tests.sweeps import secrets as planted
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("private_endpoints")]
VIEWPORTS = {"desktop": {"width": 1440, "height": 900}, "mobile": {"width": 390, "height": 844}}


@pytest.fixture
def workspace(app):
    group = factories.populate("Acme Research")
    actor = audit.SystemActor(group.owner.email)
    row = service.create_config(group.tenant, actor, "Local Docker", "Quick experiments.",
                                factories.config_doc("docker", env_vars={
                                    "OPENAI_API_KEY": "sk-lost-1", "DATASET_TOKEN": "tok-lost-2"}))
    with planted.using_keys(app, [planted.new_key()]):  # the old key is deleted
        db.session.expire_all()
        yield group, row.id
        db.session.rollback()


@pytest.mark.parametrize("size", list(VIEWPORTS))
def test_a_lost_key_leaves_the_page_working_and_the_editor_asks_for_re_entry(
        chromium, live_server, workspace, size):
    group, config_id = workspace
    context = chromium.new_context(viewport=VIEWPORTS[size], base_url=live_server)
    tab = context.new_page()
    tab.set_default_timeout(10_000)
    try:
        sign_in(tab, group.admin.email)
        tab.goto("/sandboxes")
        card = tab.locator(".sandbox-card", has_text="Local Docker")
        card.get_by_text("Secrets need re-entry").wait_for()
        card.get_by_role("link", name="Edit").click()
        drawer = tab.locator(".drawer")
        notes = drawer.locator(".needs-reentry")
        notes.first.wait_for()
        assert notes.count() == 2
        notes.first.evaluate("el => el.scrollIntoView({block: 'center'})")
        tab.mouse.move(0, 0)
        assert tab.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[size]["width"]
        shot(tab, f"sandbox-editor-needs-reentry-{size}.png")
        assert "sk-lost" not in tab.content() and "gAAAAA" not in tab.content()

        if size == "desktop":  # typing the values again repairs it
            keys = drawer.locator('input[name^="env_vars"][name$=".key"]')
            values = drawer.get_by_label("Value")
            typed = {keys.nth(i).input_value(): f"new-{i}" for i in range(2)}
            for i in range(2):
                values.nth(i).fill(f"new-{i}")
            drawer.get_by_role("button", name="Save").click()
            tab.get_by_text("Saved “Local Docker”.").wait_for()
            tab.wait_for_url(re.compile(r"/sandboxes"))
            assert tab.locator(".sandbox-card", has_text="Secrets need re-entry").count() == 0
            db.session.expire_all()
            assert set(typed) == {"OPENAI_API_KEY", "DATASET_TOKEN"}
            assert db.session.get(SandboxConfig, config_id).config["env_vars"] == typed
    finally:
        context.close()
