"""Every page works under the Content-Security-Policy in headless Chromium: no violation is
reported on any page or after htmx swaps, and the playground's Ctrl+Enter (once an htmx
trigger filter, which needs eval) still runs a command."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.errors import AppError
from app.extensions import db
from app.models import SandboxSession, Tenant, User
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sessions import lifecycle
from tests import factories
from tests.sweeps import routes
from tests.web.test_browser import sign_in

pytestmark = pytest.mark.browser
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
TAB_TIMEOUT_MS = 20_000
# Pages that are downloads or streams, not documents a browser renders.
NOT_PAGES = re.compile(r"\.csv$|/events$|/stream$")
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " +
                    (e.sourceFile || "") + ":" + e.lineNumber);
});
"""


@pytest.fixture
def watched(chromium, live_server) -> Iterator[tuple[object, list[str]]]:
    """A tab that records every CSP violation: DOM events and console reports alike."""
    context = chromium.new_context(viewport={"width": 1440, "height": 900}, base_url=live_server)
    context.add_init_script(WATCH)
    page = context.new_page()
    page.set_default_timeout(TAB_TIMEOUT_MS)
    page.on("dialog", lambda dialog: dialog.accept())
    console: list[str] = []
    page.on("console", lambda msg: console.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    yield page, console
    context.close()


def violations(page, console: list[str]) -> list[str]:
    return [*page.evaluate("window.__csp || []"), *console]


def web_pages(app, world: factories.TenantUsers) -> list[str]:
    rows = routes.Rows(world)
    paths = []
    for route in routes.iter_routes(app):
        if route.is_api or route.method != "GET" or route.endpoint == "web.logout":
            continue
        path = routes.build_path(app, route, rows.values(route))
        if not NOT_PAGES.search(path):
            paths.append(path)
    return paths


@pytest.mark.console_errors("status of 404")  # the walk asks for rows it cannot see
def test_no_page_reports_a_csp_violation(app, watched):
    page, console = watched
    world = factories.populate("Acme Research")
    page.goto("/login")
    page.wait_for_load_state("networkidle")
    assert not violations(page, console), "/login"
    sign_in(page, world.owner.email)
    problems, seen = [], 0
    for path in web_pages(app, world):
        response = page.goto(path)
        page.wait_for_load_state("networkidle")
        if response is not None and "text/html" in response.headers.get("content-type", ""):
            seen += 1
            assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        found = violations(page, console)
        if found:
            problems.append(f"{path}: {found}")
        console.clear()
    assert seen >= 8, f"only {seen} HTML pages visited; the sweep would be vacuous"
    assert not problems, "\n".join(problems)


def test_htmx_swaps_work_under_the_policy(watched):
    """An htmx form post swaps a fragment and an out-of-band flash in, with no violation."""
    page, console = watched
    world = factories.populate("Acme Research")
    sign_in(page, world.admin.email)
    page.goto("/api-keys")
    page.get_by_label("Name").fill("CSP check key")
    page.get_by_label("Full access").check()
    page.get_by_role("button", name="Create key").click()
    page.locator("#new-key-value").wait_for()  # swapped in by htmx
    page.get_by_role("button", name="Copy").click()  # app.js still runs
    page.get_by_text("CSP check key").first.wait_for()
    assert not violations(page, console)


@pytest.fixture
def docker_workspace() -> Iterator[factories.TenantUsers]:
    from tests.backends.conftest import BASE_IMAGE, require_docker

    require_docker()
    group = factories.populate("Acme Research")
    actor = audit.SystemActor(group.owner.email)
    service.create_config(group.tenant, actor, "Local Docker", "", factories.config_doc(
        "docker", {"image": BASE_IMAGE, "network_mode": "none"}))
    yield group
    db.session.rollback()
    for session in db.session.scalars(select(SandboxSession)).all():
        try:
            lifecycle.delete_session(db.session.get(Tenant, session.tenant_id),
                                    db.session.get(User, session.user_id), session)
        except AppError:
            db.session.rollback()


def test_ctrl_enter_runs_a_playground_command_without_eval(watched, docker_workspace):
    page, console = watched
    sign_in(page, docker_workspace.contributor.email)
    page.goto("/playground")
    form = page.locator("#open-session")
    form.get_by_label("Sandbox config").select_option(label="Local Docker · Docker")
    form.get_by_label("Title").fill("Keyboard")
    form.get_by_role("button", name="Open session").click()
    page.wait_for_url(re.compile(r"/playground/[0-9a-f-]{36}$"))
    command = page.locator("#session-pane").get_by_label("Command")
    command.fill("echo keyboard-$((40+2))")
    command.press("Control+Enter")
    page.locator("#transcript .run .run-out").first.wait_for()
    assert page.locator("#transcript .run .run-out").first.inner_text() == "keyboard-42"
    assert not violations(page, console)


@pytest.mark.console_errors("status of 401", "status of 429")  # refused on purpose
@pytest.mark.parametrize("width,height,name", [(1440, 900, "login-rate-limited.png"),
                                               (390, 844, "login-rate-limited-mobile.png")])
def test_the_rate_limited_sign_in_page(app, chromium, live_server, width, height, name):
    """After too many failures the form says so plainly (429); screenshots for review."""
    user = factories.make_user(f"limited-{width}@example.test", factories.make_tenant(name))
    saved = app.config["LOGIN_RATE_LIMIT_PER_ACCOUNT"]
    app.config["LOGIN_RATE_LIMIT_PER_ACCOUNT"] = "2 per minute"
    context = chromium.new_context(viewport={"width": width, "height": height},
                                   base_url=live_server)
    try:
        page = context.new_page()
        for attempt in range(3):
            page.goto("/login")
            page.get_by_label("Email").fill(user.email)
            page.get_by_label("Password").fill("wrong-password")
            with page.expect_response(re.compile(r"/login$")) as answer:
                page.get_by_role("button", name="Sign in").click()
            assert answer.value.status == (429 if attempt == 2 else 401)
        page.get_by_text("Too many sign-in attempts").wait_for()
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / name))
    finally:
        app.config["LOGIN_RATE_LIMIT_PER_ACCOUNT"] = saved
        context.close()
