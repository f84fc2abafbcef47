"""Every page renders for the roles it serves, and the layout keeps its promises."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from app.models import Role
from tests import factories
from tests.web._support import htmx_headers, post_form, text

ADMIN_PAGES = ["/members", "/api-keys"]
MEMBER_PAGES = ["/", "/account"]


@pytest.mark.parametrize("role", list(Role))
def test_member_pages_render_for_every_role(two_tenants, login_as, role):
    a, _ = two_tenants
    client = login_as(a.by_role[role], a.tenant)
    for path in MEMBER_PAGES:
        response = client.get(path)
        assert response.status_code == 200, path
        assert "Tenant A" in text(response)


@pytest.mark.parametrize("role", [Role.admin, Role.owner])
def test_admin_pages_render_for_admins(two_tenants, login_as, role):
    a, _ = two_tenants
    client = login_as(a.by_role[role], a.tenant)
    for path in ADMIN_PAGES:
        response = client.get(path)
        assert response.status_code == 200, path


@pytest.mark.parametrize("role", [Role.viewer, Role.contributor])
def test_admin_pages_are_forbidden_below_admin(two_tenants, login_as, role):
    a, _ = two_tenants
    client = login_as(a.by_role[role], a.tenant)
    for path in ADMIN_PAGES:
        response = client.get(path)
        assert response.status_code == 403, path
        assert "Not allowed" in text(response)


@pytest.mark.parametrize("path", [*MEMBER_PAGES, *ADMIN_PAGES])
def test_anonymous_get_redirects_to_login(client, path):
    response = client.get(path)
    assert response.status_code == 302
    location = urlsplit(response.headers["Location"])
    assert location.path == "/login"
    assert "next=" in location.query


def test_anonymous_htmx_request_gets_hx_redirect(client):
    response = client.get("/members", headers={"HX-Request": "true"})
    assert urlsplit(response.headers["HX-Redirect"]).path == "/login"
    assert response.status_code == 204


def test_a_post_without_csrf_token_is_refused(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = client.post("/members/invitations", data={"email": "new@x.test",
                                                         "role": "viewer"})
    assert response.status_code == 400
    assert "form expired" in text(response)
    assert "new@x.test" not in text(client.get("/members"))


def test_an_htmx_post_without_csrf_header_gets_an_error_flash(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    response = client.post("/api-keys", data={"name": "k", "full_access": "y"},
                           headers={"HX-Request": "true"})
    assert response.status_code == 400
    assert response.headers["HX-Retarget"] == "#flashes"
    assert response.headers["HX-Reswap"] == "beforeend"
    assert 'class="flash flash-error"' in text(response)


def test_htmx_forbidden_answers_a_flash_fragment(two_tenants, login_as):
    a, _ = two_tenants
    response = login_as(a.viewer, a.tenant).get("/members", headers={"HX-Request": "true"})
    assert response.status_code == 403
    assert response.headers["HX-Retarget"] == "#flashes"
    assert "<html" not in text(response)


def test_layout_carries_csrf_meta_htmx_config_and_no_cdn(two_tenants, login_as):
    a, _ = two_tenants
    page = text(login_as(a.viewer, a.tenant).get("/"))
    assert '<meta name="csrf-token" content="' in page
    assert '"X-CSRFToken"' in page and "hx-headers=" in page
    assert '"[45]..", "swap": true' in page  # htmx swaps error answers (our error fragments)
    assert "/static/vendor/htmx.min.js" in page
    assert "<script src=\"http" not in page and "cdn" not in page.lower()


def test_responses_vary_on_hx_request(two_tenants, login_as):
    a, _ = two_tenants
    response = login_as(a.viewer, a.tenant).get("/")
    assert "HX-Request" in response.headers.get("Vary", "")


@pytest.mark.parametrize("role", list(Role))
def test_personal_variables_is_a_link_for_every_role(two_tenants, login_as, role):
    a, _ = two_tenants
    page = text(login_as(a.by_role[role], a.tenant).get("/"))
    assert 'href="/personal-variables"' in page
    assert 'title="Arrives in a later release"' not in page and "nav-soon" not in page


@pytest.mark.parametrize("role", list(Role))
def test_skills_is_a_link_for_every_role(two_tenants, login_as, role):
    a, _ = two_tenants
    page = text(login_as(a.by_role[role], a.tenant).get("/"))
    assert 'href="/skills"' in page and "<span>Skills</span>" in page


@pytest.mark.parametrize("role", list(Role))
def test_sandboxes_is_a_link_for_every_role(two_tenants, login_as, role):
    a, _ = two_tenants
    page = text(login_as(a.by_role[role], a.tenant).get("/"))
    assert 'href="/sandboxes"' in page and "<span>Sandboxes</span>" in page


def test_members_and_keys_links_only_for_admins(two_tenants, login_as):
    a, _ = two_tenants
    viewer_page = text(login_as(a.viewer, a.tenant).get("/"))
    admin_page = text(login_as(a.admin, a.tenant).get("/"))
    for href in ('href="/members"', 'href="/api-keys"'):
        assert href not in viewer_page
        assert href in admin_page
    assert "Export audit log" in admin_page and "Export audit log" not in viewer_page


def test_user_menu_shows_email_role_account_and_sign_out(two_tenants, login_as):
    a, _ = two_tenants
    page = text(login_as(a.contributor, a.tenant).get("/"))
    assert a.contributor.email in page
    assert "badge-contributor" in page
    assert 'href="/account"' in page
    assert 'action="/logout"' in page


def test_dashboard_lists_recent_activity(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.admin, a.tenant)
    post_form(client, "/members/invitations", {"email": "fresh@a.test", "role": "viewer"})
    page = text(client.get("/"))
    assert "Recent activity" in page
    assert "invited fresh@a.test as viewer" in page
    assert a.admin.email in page  # who
    assert ">4<" in page  # four seeded members: an invitation is not yet a member


def test_tenant_switcher_lists_memberships_and_switches(two_tenants, login_as):
    a, b = two_tenants
    factories.make_user(a.admin.email, b.tenant, Role.viewer)
    client = login_as(a.admin, a.tenant)
    page = text(client.get("/"))
    assert f'action="/switch-tenant/{b.tenant.id}"' in page
    response = post_form(client, f"/switch-tenant/{b.tenant.id}")
    assert response.status_code == 302
    page = text(client.get("/"))
    assert "<h1>Tenant B</h1>" in page
    assert client.get("/members").status_code == 403  # a viewer in B


def test_switching_to_a_foreign_tenant_is_404(two_tenants, login_as):
    a, b = two_tenants
    client = login_as(a.admin, a.tenant)
    assert post_form(client, f"/switch-tenant/{b.tenant.id}").status_code == 404


def test_unknown_page_is_a_friendly_404_inside_the_layout(two_tenants, login_as):
    a, _ = two_tenants
    response = login_as(a.viewer, a.tenant).get("/no-such-page")
    assert response.status_code == 404
    assert "Page not found" in text(response)
    assert "it is not part of this workspace" in text(response)
    assert 'class="sidebar"' in text(response)


def test_anonymous_404_has_no_sidebar(client):
    response = client.get("/no-such-page")
    assert response.status_code == 404 and 'class="sidebar"' not in text(response)


def test_login_page_stays_bare_for_a_signed_in_user(two_tenants, login_as):
    a, _ = two_tenants
    page = text(login_as(a.viewer, a.tenant).get("/login"))
    assert 'class="card auth-card"' in page and 'class="sidebar"' not in page


def test_login_page_signs_in_and_reports_a_wrong_password(two_tenants, client):
    a, _ = two_tenants
    page = client.get("/login")
    assert page.status_code == 200 and "Sign in" in text(page)
    bad = post_form(client, "/login", {"email": a.viewer.email, "password": "wrong"},
                    token_from="/login")
    assert bad.status_code == 401
    assert "Email or password is incorrect." in text(bad)
    good = post_form(client, "/login?next=/account",
                     {"email": a.viewer.email, "password": factories.PASSWORD},
                     token_from="/login")
    assert good.status_code == 302 and good.headers["Location"] == "/account"
    assert "<h1>Tenant A</h1>" in text(client.get("/"))


def test_sign_out_is_a_post_and_ends_the_session(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    assert client.get("/logout").status_code == 405
    response = post_form(client, "/logout")
    assert urlsplit(response.headers["Location"]).path == "/login"
    assert client.get("/").status_code == 302


def test_htmx_headers_helper_reads_the_token(two_tenants, login_as):
    a, _ = two_tenants
    headers = htmx_headers(login_as(a.viewer, a.tenant))
    assert headers["HX-Request"] == "true" and len(headers["X-CSRFToken"]) > 20
