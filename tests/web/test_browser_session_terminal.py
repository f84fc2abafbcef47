"""A session's web terminal in headless Chromium (issue 26 item 2), against a real Docker
sandbox: from the Playground to a shell that answers, a window resize the shell sees, Ctrl-C
from the key row, the idle disconnect's and the sixth terminal's sentences with a Reconnect
button, and a session without a sandbox started from the page. No CSP report or console
error on the way (tests/web/conftest.py); axe and a phone's width. Screenshots at 1440x900
and 390x844."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from app.services.sessions import terminals
from tests.web.test_a11y import PHONE, overflow, serious
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]
TAB_TIMEOUT_MS = 20_000
DESKTOP = {"width": 1440, "height": 900}


def screen(page):
    return page.locator(".term-screen .xterm-rows")


def run(page, line: str) -> None:
    """Types a line into the shell (the terminal has the focus)."""
    page.keyboard.type(line)
    page.keyboard.press("Enter")


def connected(page) -> None:
    expect(page.get_by_role("status")).to_have_text("Connected.")
    expect(screen(page)).to_contain_text("$")
    expect(page.get_by_role("button", name="Reconnect")).to_be_hidden()


def fits(page) -> bool:
    """Every row and column of the terminal lies inside its box (none cut off)."""
    return page.evaluate("""() => {
        const box = document.querySelector(".term-screen").getBoundingClientRect();
        const grid = document.querySelector(".term-screen .xterm-screen").getBoundingClientRect();
        return grid.bottom <= box.bottom + 0.5 && grid.right <= box.right + 0.5;
    }""")


def one_colour(page) -> bool:
    """The box and xterm's viewport are one dark colour (xterm.css paints it black)."""
    return page.evaluate("""() => {
        const colour = (s) => getComputedStyle(document.querySelector(s)).backgroundColor;
        return colour(".term-screen") === colour(".term-screen .xterm-viewport");
    }""")


def stty_size(page, mark: str) -> tuple[int, int]:
    run(page, f"echo {mark}-size:$(stty size)")
    pattern = re.compile(mark + r"-size:(\d+) (\d+)")
    expect(screen(page)).to_contain_text(pattern)
    rows, cols = pattern.search(screen(page).inner_text().replace("\xa0", " ")).groups()
    return int(rows), int(cols)


def test_a_member_works_in_a_shell_of_the_session_s_sandbox(tab, docker_sessions):
    group, session, _ = docker_sessions
    tab.set_viewport_size(DESKTOP)
    sign_in(tab, group.contributor.email)
    tab.goto(f"/playground/{session.id}")
    tab.get_by_role("link", name="Terminal").click()
    tab.wait_for_url("**/terminal")
    connected(tab)
    run(tab, "echo hi-$((6*7))")
    expect(screen(tab)).to_contain_text("hi-42")
    assert "A reconnect starts a new shell." in tab.locator(".term-note").inner_text()

    # The terminal follows the window: the shell sees its new size.
    before = stty_size(tab, "a")
    tab.set_viewport_size({"width": 1000, "height": 700})
    tab.wait_for_timeout(300)
    after = stty_size(tab, "b")
    assert after[0] < before[0] and after[1] < before[1], (before, after)
    assert fits(tab) and one_colour(tab)

    # Ctrl on the key row, then c: the shell gets Ctrl-C and the sleep stops.
    run(tab, "sleep 100")
    ctrl = tab.get_by_role("button", name="Ctrl")
    ctrl.click()
    expect(ctrl).to_have_attribute("aria-pressed", "true")
    tab.keyboard.type("c")
    expect(ctrl).to_have_attribute("aria-pressed", "false")
    run(tab, "echo after-$((2+3))")
    expect(screen(tab)).to_contain_text("after-5", timeout=5_000)

    # The key row's Up arrow recalls that line; its Tab completes a path.
    tab.get_by_role("button", name="Up arrow").click()
    tab.keyboard.press("Enter")
    expect(screen(tab)).to_contain_text(re.compile(r"after-5[\s\S]*after-5"))
    tab.keyboard.type("cd /wor")
    tab.get_by_role("button", name="Tab").click()
    run(tab, "&& echo in-$(basename $PWD)")
    expect(screen(tab)).to_contain_text("in-workspace")
    # Tab belongs to the shell, so Shift+Tab is the way out of the terminal.
    tab.keyboard.press("Shift+Tab")
    assert tab.evaluate("!document.activeElement.closest('.xterm')")
    tab.locator(".term-screen").click()

    tab.set_viewport_size(DESKTOP)
    run(tab, "clear; ls -la / | head -12")
    expect(screen(tab)).to_contain_text("workspace")
    assert serious(tab) == []
    shot(tab, "session-terminal.png")

    tab.set_viewport_size(PHONE)
    tab.wait_for_timeout(300)
    phone = stty_size(tab, "c")
    assert phone[1] < after[1]
    assert fits(tab)
    assert overflow(tab) <= 0
    assert serious(tab) == []
    # The key row fits the width, is tall enough to touch, and shows on the first screen.
    tab.evaluate("window.scrollTo(0, 0)")
    for key in tab.locator("[data-term-key]").all():
        box = key.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] and box["height"] >= 32
    assert tab.get_by_role("button", name="Ctrl").bounding_box()["y"] + 36 <= PHONE["height"]
    shot(tab, "session-terminal-mobile.png")


@pytest.mark.console_errors("status of 429")  # the sixth terminal's ticket is refused
def test_idle_terminals_and_the_sixth_say_why_and_offer_a_reconnect(
        tab, docker_sessions, monkeypatch):
    group, session, _ = docker_sessions
    monkeypatch.setattr(terminals, "IDLE_DEFAULT_SEC", 2)
    tab.set_viewport_size(DESKTOP)
    sign_in(tab, group.contributor.email)
    tab.goto(f"/playground/{session.id}/terminal")
    assert "After 2 seconds without input" in tab.locator(".term-note").inner_text()
    status = tab.get_by_role("status")
    expect(status).to_have_text("This terminal was closed after 2 seconds without input.",
                                timeout=15_000)
    reconnect = tab.get_by_role("button", name="Reconnect")
    expect(reconnect).to_be_focused()
    monkeypatch.setattr(terminals, "IDLE_DEFAULT_SEC", 60)
    reconnect.click()
    connected(tab)
    run(tab, "echo again-$((3*3))")
    expect(screen(tab)).to_contain_text("again-9")

    # That is one terminal; four more tabs make five, and the sixth is refused.
    others = [tab.context.new_page() for _ in range(4)]
    for other in others:
        other.goto(f"/playground/{session.id}/terminal")
        connected(other)
    sixth = tab.context.new_page()
    sixth.set_viewport_size(PHONE)
    sixth.goto(f"/playground/{session.id}/terminal")
    expect(sixth.get_by_role("status")).to_have_text(re.compile(
        r"^A session may have at most 5 terminals .*; close one \(another tab\) first\.$"))
    expect(sixth.get_by_role("button", name="Reconnect")).to_be_visible()
    assert serious(sixth) == []
    shot(sixth, "session-terminal-refused-mobile.png")

    # Closing one tab makes room: the sixth's Reconnect now opens a shell. The server
    # frees the closed one's place when its relay sees the socket close, which a loaded
    # machine can take a moment over: a Reconnect before that is refused again, and the
    # next one connects (as a person would try again).
    others[0].close()
    status = sixth.get_by_role("status")
    deadline = time.monotonic() + 20
    while True:
        sixth.get_by_role("button", name="Reconnect").click()
        expect(status).not_to_have_text(re.compile(r"^(Connecting|Opening)"), timeout=10_000)
        if status.inner_text().startswith("Connected") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    connected(sixth)


def test_a_session_without_a_sandbox_starts_one_from_the_terminal_page(tab, docker_sessions):
    group, _, fresh = docker_sessions
    tab.set_viewport_size(PHONE)
    sign_in(tab, group.contributor.email)
    tab.goto(f"/playground/{fresh.id}/terminal")
    assert tab.locator(".term-screen").count() == 0
    expect(tab.get_by_text("This session has no sandbox running.")).to_be_visible()
    assert overflow(tab) <= 0
    assert serious(tab) == []
    shot(tab, "session-terminal-start-mobile.png")
    tab.set_viewport_size(DESKTOP)
    shot(tab, "session-terminal-start.png")

    tab.get_by_role("button", name="Start sandbox").click()
    tab.wait_for_url(f"**/playground/{fresh.id}/terminal")
    connected(tab)
    run(tab, "echo started-$((40+2))")
    expect(screen(tab)).to_contain_text("started-42")

    # Away and back: the page opens a new shell, and nothing is logged on the way.
    tab.get_by_role("link", name="Back to the session").click()
    tab.wait_for_url(f"**/playground/{fresh.id}")
    tab.go_back()
    connected(tab)
    assert "started-42" not in screen(tab).inner_text()
