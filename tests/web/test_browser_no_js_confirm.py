"""Without JavaScript a delete or revoke still asks first (issue 15): the button GETs a
confirmation page ("Revoke X? [Revoke] [Cancel]") whose button posts; nothing changes
until that second click. With htmx the popover asks instead (test_browser_dialogs)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import ApiKey, Invitation, Membership, Role, SandboxConfig, SkillCatalogEntry
from app.services import audit
from app.services.identity import invitations
from tests import factories
from tests.api.test_paging import add_configs
from tests.sweeps import routes
from tests.web.test_api_keys import add_keys
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]

SIZES = {"": {"width": 1440, "height": 900}, "-mobile": {"width": 390, "height": 844}}


@pytest.fixture
def no_js(chromium, live_server):
    context = chromium.new_context(java_script_enabled=False, base_url=live_server,
                                   viewport=SIZES[""])
    page = context.new_page()
    page.set_default_timeout(10_000)
    yield page
    context.close()


def test_revoke_a_key_without_javascript_asks_first(no_js):
    group = factories.populate("Acme Research")
    (key,) = add_keys(group.tenant, 1)
    sign_in(no_js, group.admin.email)
    no_js.goto("/api-keys")
    no_js.locator("button:text-is('Revoke')").click()
    no_js.get_by_role("heading", name="Revoke “key-000”?").wait_for()
    db.session.expire_all()
    assert db.session.get(ApiKey, key.id).revoked_at is None  # asking changed nothing
    for suffix, size in SIZES.items():
        no_js.set_viewport_size(size)
        shot(no_js, f"confirm-no-js{suffix}.png")
        assert no_js.evaluate("document.documentElement.scrollWidth") <= size["width"]
    no_js.get_by_role("link", name="Cancel").click()
    no_js.wait_for_url("**/api-keys")
    db.session.expire_all()
    assert db.session.get(ApiKey, key.id).revoked_at is None
    no_js.locator("button:text-is('Revoke')").click()
    no_js.locator(".confirm-page button:text-is('Revoke')").click()
    no_js.get_by_text("Revoked “key-000”").wait_for()
    db.session.expire_all()
    assert db.session.get(ApiKey, key.id).revoked_at is not None


def test_delete_a_config_and_a_skill_without_javascript_asks_first(no_js):
    group = factories.populate("Acme Research")
    (config_id,) = add_configs(group.tenant, 1)  # a Docker config: nothing live on it
    skill_id = routes.make_catalog_skill(group.tenant)
    sign_in(no_js, group.admin.email)
    no_js.goto("/sandboxes")
    no_js.locator(".sandbox-actions button:text-is('Delete')").first.click()
    no_js.locator(".confirm-page h1", has_text="Delete “").wait_for()
    db.session.expire_all()
    assert db.session.get(SandboxConfig, config_id).deleted_at is None
    no_js.locator(".confirm-page button:text-is('Delete')").click()
    no_js.get_by_text("Deleted “").wait_for()
    db.session.expire_all()
    assert db.session.get(SandboxConfig, config_id).deleted_at is not None

    no_js.goto("/skills")
    no_js.locator(".skill-actions button:text-is('Delete')").first.click()
    no_js.locator(".confirm-page h1", has_text="from the catalog?").wait_for()
    db.session.expire_all()
    assert db.session.get(SkillCatalogEntry, skill_id).deleted_at is None
    no_js.locator(".confirm-page button:text-is('Delete')").click()
    no_js.get_by_text("from the catalog.").wait_for()
    db.session.expire_all()
    assert db.session.get(SkillCatalogEntry, skill_id).deleted_at is not None


def test_remove_a_member_and_revoke_an_invitation_without_javascript_asks_first(no_js):
    group = factories.populate("Acme Research")
    owner = audit.SystemActor(group.owner.email)
    invitation, _ = invitations.create_invitation(group.tenant, owner, Role.owner,
                                                  "sam@acme-research.test", Role.viewer)
    invitation_id, viewer_id = invitation.id, group.viewer.id
    sign_in(no_js, group.admin.email)
    no_js.goto("/members")
    no_js.locator(f"form[action$='/invitations/{invitation_id}/revoke'] button").click()
    no_js.get_by_role("heading", name="Revoke the invitation of sam@acme-research.test?").wait_for()
    db.session.expire_all()
    assert db.session.get(Invitation, invitation_id).revoked_at is None
    no_js.locator(".confirm-page button:text-is('Revoke')").click()
    no_js.get_by_text("Revoked the invitation of sam@acme-research.test").wait_for()
    db.session.expire_all()
    assert db.session.get(Invitation, invitation_id).revoked_at is not None

    row = db.session.scalar(select(Membership).where(Membership.user_id == viewer_id))
    no_js.locator(f"form[action$='/members/{row.id}/remove'] button").click()
    no_js.locator(".confirm-page h1", has_text=f"Remove {group.viewer.email}").wait_for()
    assert db.session.get(Membership, row.id) is not None
    no_js.locator(".confirm-page button:text-is('Remove')").click()
    no_js.get_by_text(f"Removed {group.viewer.email}").wait_for()
    db.session.expire_all()
    assert db.session.scalar(select(Membership).where(Membership.user_id == viewer_id)) is None
