"""The Personal variables page (reference 10.3) over htmx with CSRF: values never rendered,
a member only ever touches their own rows, refusals shown in the page."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import PersonalEnvVar
from tests.conftest import csrf_token
from tests.personal.helpers import config, declare, skill

PAGE = "/personal-variables"
SECRET = "page-canary-77ab"
HX = {"HX-Request": "true"}


@pytest.fixture
def w(two_tenants, login_as):
    a, b = two_tenants
    cfg = config(a.tenant, "alpha")
    sk = skill(a.tenant, cfg, declare("API_TOKEN", required=True) + declare("REGION"),
               {"REGION": "ws-region-value"}, name="weather", description="Weather lookups")
    return a, b, cfg, sk, login_as(a.viewer, a.tenant), login_as(a.admin, a.tenant)


def post(client, path, data):
    token = csrf_token(client, PAGE)
    return client.post(path, data=data, headers={**HX, "X-CSRFToken": token})


def test_page_lists_configs_skills_and_tags_without_values(w):
    _, _, cfg, sk, viewer, _ = w
    html = viewer.get(PAGE).get_data(as_text=True)
    assert "weather" in html and "API_TOKEN" in html and "required" in html
    assert "workspace value" in html and "unset" in html and "needs 1" in html
    assert "Your value beats the workspace value" in html
    assert "ws-region-value" not in html
    assert 'type="password"' in html and "Soon" not in html


def test_set_replace_clear_through_htmx(w):
    a, _, cfg, sk, viewer, admin = w
    response = post(viewer, f"{PAGE}/skill", {"skill_id": sk.id, "name": "API_TOKEN",
                                              "value": SECRET})
    html = response.get_data(as_text=True)
    assert response.status_code == 200 and "set by you" in html and SECRET not in html
    assert "Saved your value for API_TOKEN" in html
    assert SECRET not in admin.get(PAGE).get_data(as_text=True)
    assert "set by you" not in _var(admin.get(PAGE).get_data(as_text=True), "API_TOKEN")
    response = post(viewer, f"{PAGE}/skill/clear", {"skill_id": sk.id, "name": "API_TOKEN"})
    assert "Cleared" in response.get_data(as_text=True)
    assert db.session.scalar(select(PersonalEnvVar.id)) is None


def test_sandbox_wide_add_replace_delete_and_refusals(w):
    _, _, cfg, _, viewer, _ = w
    added = post(viewer, f"{PAGE}/sandbox", {"sandbox_config_id": cfg, "name": "MY_KEY",
                                             "value": SECRET})
    assert added.status_code == 200 and "MY_KEY" in added.get_data(as_text=True)
    bad = post(viewer, f"{PAGE}/sandbox", {"sandbox_config_id": cfg, "name": "PATH",
                                           "value": SECRET})
    body = bad.get_data(as_text=True)
    assert bad.status_code == 400 and "reserved" in body and SECRET not in body
    empty = post(viewer, f"{PAGE}/sandbox", {"sandbox_config_id": cfg, "name": "MY_KEY",
                                             "value": ""})
    assert empty.status_code == 400 and "delete MY_KEY to clear it" in empty.get_data(
        as_text=True)
    gone = post(viewer, f"{PAGE}/sandbox/delete", {"sandbox_config_id": cfg, "name": "MY_KEY"})
    assert gone.status_code == 200 and db.session.scalar(select(PersonalEnvVar.id)) is None


def test_a_member_cannot_clear_another_members_value_from_the_page(w):
    a, _, cfg, sk, viewer, admin = w
    post(admin, f"{PAGE}/skill", {"skill_id": sk.id, "name": "API_TOKEN", "value": "admins"})
    tried = post(viewer, f"{PAGE}/skill/clear", {"skill_id": sk.id, "name": "API_TOKEN",
                                                 "principal_id": str(a.admin.id)})
    assert tried.status_code == 404
    assert db.session.scalar(select(PersonalEnvVar.value)) == "admins"


def test_writes_without_csrf_are_refused(w):
    _, _, cfg, _, viewer, _ = w
    response = viewer.post(f"{PAGE}/sandbox", data={"sandbox_config_id": cfg, "name": "X",
                                                    "value": "v"}, headers=HX)
    assert response.status_code in (400, 403)
    assert db.session.scalar(select(PersonalEnvVar.id)) is None


def _var(html: str, name: str) -> str:
    match = re.search(rf'data-var="{name}".*?</li>', html, re.S)
    assert match
    return match.group(0)
