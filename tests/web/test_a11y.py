"""One browser walk over every page and drawer of the console: axe-core finds no serious or
critical violation, and nothing scrolls sideways on a 390x844 phone.

The page list is built from url_map (every GET web route, filled with the rows a
factory-made workspace gives), so a page added later is walked without touching this file.
States a bare URL cannot reach (a drawer opened by its button, a filtered list) go in
EXTRA_PAGES or DRAWER_OPENERS: append to them. Each page leaves a screenshot per viewport
under docs/screenshots/pages/ (override the folder with SANDLOT_SHOTS_DIR).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from axe_playwright_python.sync_playwright import Axe

from app.models import Role
from app.services import audit
from app.services.identity import api_keys, invitations
from tests import factories
from tests.sweeps import routes
from tests.web.test_browser import sign_in

pytestmark = pytest.mark.browser
TAB_TIMEOUT_MS = 15_000

SHOTS = Path(os.environ.get("SANDLOT_SHOTS_DIR") or
             Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "pages")
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
BLOCKING = {"serious", "critical"}
# Routes that are not pages of their own: pieces htmx swaps into a page that is walked.
NOT_PAGES = {"web.installs_live"}


@dataclass(frozen=True)
class Visit:
    """One page to walk: a name for reports and screenshots, and its URL."""

    name: str
    path: str
    anonymous: bool = False


# Appendable: pages in a state their route alone does not show.
EXTRA_PAGES: list[Visit] = [
    Visit("sandboxes-sessions-tab", "/sandboxes?tab=sessions"),
    Visit("not-found", "/no-such-page"),
    Visit("not-found-anonymous", "/no-such-page", anonymous=True),
]
# Appendable: (page, the link or button that opens a drawer there), opened by clicking so the
# htmx path (focus, pushed URL) is what axe sees.
DRAWER_OPENERS: list[tuple[str, str]] = [
    ("/sandboxes", "a.sandbox-add"),
    ("/sandboxes", "a:text-is('Edit')"),
    ("/sandboxes", "a:text-is('Inventory')"),
    ("/skills", "a.skill-add"),
    ("/skills", "a:text-is('Install')"),
    ("/skills", "a.chip-link"),
]


@pytest.fixture
def world() -> factories.TenantUsers:
    """A workspace with every role, a second workspace, an invitee and a key, as the
    journeys in test_browser.py build it."""
    group = factories.populate("Acme Research")
    factories.make_user(group.admin.email, factories.make_tenant("Acme Labs"), Role.viewer)
    owner = audit.SystemActor(group.owner.email)
    invitation, _ = invitations.create_invitation(group.tenant, owner, Role.owner,
                                                  "sam@acme-research.test", Role.contributor)
    invitations.accept_as_new(invitation, factories.PASSWORD)
    api_keys.create_key(group.tenant, owner, name="Nightly evals", full_access=True,
                        capabilities=[], expires_at=None, pepper=factories.PEPPER)
    return group


def page_visits(app, login_as, world, user=None) -> list[Visit]:
    """Every GET web route that is a full HTML page for `user` (the owner by default), with
    real ids of `world`'s rows."""
    rows = routes.Rows(world)
    client = login_as(user or world.owner, world.tenant)
    visits = []
    for route in routes.iter_routes(app):
        if route.is_api or route.method != "GET" or route.endpoint in NOT_PAGES:
            continue
        path = routes.build_path(app, route, rows.values(route))
        response = client.get(path)
        try:
            html = 200 <= response.status_code < 300 and response.mimetype == "text/html"
            if html and "<html" in response.get_data(as_text=True)[:400]:
                visits.append(Visit(route.endpoint.removeprefix("web.").replace("_", "-"),
                                    path, anonymous=route.public))
        finally:
            response.close()
    return visits + EXTRA_PAGES


def serious(page) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now."""
    results = Axe().run(page)
    found = []
    for violation in results.response["violations"]:
        if violation["impact"] in BLOCKING:
            targets = [" ".join(map(str, n["target"])) for n in violation["nodes"][:4]]
            found.append(f"{violation['id']} ({violation['impact']}): {targets}")
    return found


def overflow(page) -> int:
    """How far the page scrolls sideways (0 when it fits)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def shot(page, name: str | None) -> None:
    if name is None:
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    # A drawer is fixed to the viewport: a full-page shot would cut it off half way down.
    drawer_open = page.locator("#drawer-slot [role=dialog]").count() > 0
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=not drawer_open)


def open_tab(chromium, live_server, viewport):
    context = chromium.new_context(viewport=viewport, base_url=live_server)
    page = context.new_page()
    page.set_default_timeout(TAB_TIMEOUT_MS)
    return context, page


def walk(chromium, live_server, email, visits, viewport, label, shots=True) -> list[str]:
    problems = []
    signed, anon = open_tab(chromium, live_server, viewport), open_tab(chromium, live_server,
                                                                       viewport)
    try:
        sign_in(signed[1], email)
        for visit in visits:
            page = anon[1] if visit.anonymous else signed[1]
            page.goto(visit.path)
            page.wait_for_load_state("networkidle")
            shot(page, f"{visit.name}-{label}" if shots else None)
            problems += [f"{label} {visit.path}: {v}" for v in serious(page)]
            if viewport is PHONE and overflow(page) > 0:
                problems.append(f"{label} {visit.path}: scrolls sideways by {overflow(page)} px")
    finally:
        signed[0].close()
        anon[0].close()
    return problems


def assert_walks_home_and_activity(visits: list[Visit]) -> None:
    """The dashboard and the activity page are in every signed-in walk (issue 15 items 2, 6)."""
    paths = {urlsplit(v.path).path for v in visits if not v.anonymous}
    assert {"/", "/activity"} <= paths, sorted(paths)


@pytest.mark.console_errors("status of 404")  # the not-found page is walked too
def test_every_page_passes_axe_and_fits_a_phone(app, login_as, world, chromium, live_server):
    visits = page_visits(app, login_as, world)
    assert len(visits) >= 15, [v.path for v in visits]
    assert_walks_home_and_activity(visits)
    problems = walk(chromium, live_server, world.owner.email, visits, PHONE, "390")
    problems += walk(chromium, live_server, world.owner.email, visits, DESKTOP, "1440")
    assert not problems, "\n".join(problems)


@pytest.mark.console_errors("status of 404")  # the not-found page is walked too
@pytest.mark.parametrize("role", [Role.admin, Role.contributor])
def test_an_admins_and_a_contributors_pages_pass_axe_on_phone_and_desktop(
        app, login_as, world, chromium, live_server, role):
    """An admin and a contributor see other controls than the owner (no owner-only settings,
    no change buttons for a contributor): each is walked on a phone and on a desktop."""
    user = world.by_role[role]
    visits = [v for v in page_visits(app, login_as, world, user) if not v.anonymous]
    assert len(visits) >= 6, [v.path for v in visits]
    assert_walks_home_and_activity(visits)
    problems = []
    for viewport, label in ((PHONE, f"{role.value} 390"), (DESKTOP, f"{role.value} 1440")):
        problems += walk(chromium, live_server, user.email, visits, viewport, label,
                         shots=False)
    assert not problems, "\n".join(problems)


@pytest.mark.console_errors("status of 404")  # the not-found page is walked too
def test_a_viewers_pages_pass_axe_and_fit_a_phone(app, login_as, world, chromium, live_server):
    """A viewer sees other pages (no admin controls, no settings): walked once on a phone."""
    visits = [v for v in page_visits(app, login_as, world, world.viewer) if not v.anonymous]
    assert len(visits) >= 6, [v.path for v in visits]
    assert_walks_home_and_activity(visits)
    problems = walk(chromium, live_server, world.viewer.email, visits, PHONE, "390",
                    shots=False)
    assert not problems, "\n".join(problems)


def open_drawers(chromium, live_server, email, viewport, label) -> tuple[list[str], int]:
    """Open every drawer of DRAWER_OPENERS whose button `email` is shown; the problems found
    and how many drawers were opened."""
    problems, opened = [], 0
    context, page = open_tab(chromium, live_server, viewport)
    try:
        sign_in(page, email)
        for path, opener in DRAWER_OPENERS:
            page.goto(path)
            page.wait_for_load_state("networkidle")
            if page.locator(opener).count() == 0:
                continue  # this role is not offered the button (checked by the role tests)
            page.locator(opener).first.click()
            page.locator("#drawer-slot [role=dialog]").wait_for()
            page.wait_for_load_state("networkidle")
            # axe reads colours as painted: mid slide-in (0.2 s, opacity 0 -> 1) every text
            # would fail contrast, so let the drawer finish arriving first.
            page.locator("#drawer-slot .drawer").first.evaluate(
                "el => Promise.all(el.getAnimations().map(a => a.finished))")
            opened += 1
            where = f"{label} {path} {opener} -> {page.url}"
            heading = page.locator("#drawer-slot [role=dialog] h2").first.inner_text()
            if urlsplit(page.url).path == path or not page.title().startswith(heading):
                problems.append(f"{where}: URL or title not the drawer's ({page.title()!r})")
            problems += [f"{where}: {v}" for v in serious(page)]
            if viewport is PHONE and overflow(page) > 0:
                problems.append(f"{where}: scrolls sideways by {overflow(page)} px")
    finally:
        context.close()
    return problems, opened


@pytest.mark.parametrize("role", [Role.owner, Role.admin])
def test_every_drawer_opened_by_its_button_passes_axe(app, world, chromium, live_server, role):
    """Every drawer, opened by an owner and by an admin on a phone and a desktop. A
    contributor is offered no drawer button (every change is refused); the drawer URLs it
    may open directly are pages of its walk above."""
    routes.make_sandbox_config(world.tenant)
    routes.make_catalog_skill(world.tenant)
    routes.make_installed_skill(world.tenant)
    email = world.by_role[role].email
    problems = []
    for viewport, label in ((PHONE, f"{role.value} 390"), (DESKTOP, f"{role.value} 1440")):
        found, opened = open_drawers(chromium, live_server, email, viewport, label)
        problems += found
        if opened != len(DRAWER_OPENERS):
            problems.append(f"{label}: opened {opened} of {len(DRAWER_OPENERS)} drawers")
    assert not problems, "\n".join(problems)
