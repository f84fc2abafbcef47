"""A session's Files page in headless Chromium (issue 26 item 3): from the Playground to
the folder, an upload into /workspace/input that the session's terminal lists, a
byte-identical download, a link to /etc/shadow refused, a delete asked in place; the page
without a sandbox; phone layout and axe.
Screenshots at 1440x900 and 390x844."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app.services.sessions import lifecycle as sessions
from tests.web._support import confirm
from tests.web.test_a11y import PHONE, overflow, serious
from tests.web.test_browser import shot, sign_in

pytestmark = [pytest.mark.browser]
CONTENT = bytes(range(256)) * 16


@pytest.fixture
def workspace(docker_sessions):
    group, session, _ = docker_sessions
    sessions.exec_command(group.tenant, group.contributor, session,
                          "mkdir -p /workspace/output && echo 42 > /workspace/output/answer.txt")
    return docker_sessions


def test_a_member_uploads_downloads_and_deletes_a_session_s_files(tab, workspace, tmp_path):
    group, session, fresh = workspace
    tab.set_viewport_size({"width": 1440, "height": 900})
    sign_in(tab, group.contributor.email)
    tab.goto(f"/playground/{session.id}")
    tab.get_by_role("link", name="Files").click()
    tab.wait_for_url("**/files")
    tab.get_by_role("link", name="output").click()
    tab.get_by_role("link", name="answer.txt").wait_for()

    tab.get_by_role("link", name="workspace").click()
    source = tmp_path / "data.bin"
    source.write_bytes(CONTENT)
    tab.get_by_label("Files to upload").set_input_files(str(source))
    tab.get_by_role("button", name="Upload", exact=True).click()
    tab.get_by_text("Uploaded data.bin to /workspace/input.").wait_for()
    # The upload is in the sandbox: the session's terminal lists it.
    tab.goto(f"/playground/{session.id}/terminal")
    expect(tab.get_by_role("status")).to_have_text("Connected.")
    tab.keyboard.type("ls -l /workspace/input | grep -c data.bin | sed s/^/found-/")
    tab.keyboard.press("Enter")
    expect(tab.locator(".term-screen .xterm-rows")).to_contain_text("found-1")
    tab.get_by_role("link", name="Files").click()
    tab.get_by_role("link", name="input").click()
    with tab.expect_download() as download:
        tab.get_by_role("link", name="data.bin").click()
    assert open(download.value.path(), "rb").read() == CONTENT
    assert serious(tab) == []
    tab.mouse.move(0, 0)
    shot(tab, "session-files.png")

    tab.get_by_role("button", name="Delete data.bin").click()
    assert confirm(tab) == "Delete /workspace/input/data.bin? It cannot be undone."
    tab.get_by_text("Deleted /workspace/input/data.bin.").wait_for()
    assert tab.get_by_role("link", name="data.bin").count() == 0

    tab.set_viewport_size(PHONE)
    tab.goto(f"/playground/{session.id}/files?path=/workspace/output")
    assert overflow(tab) <= 0
    assert serious(tab) == []
    shot(tab, "session-files-mobile.png")

    # Without JavaScript a delete asks on a page of its own.
    tab.goto(f"/playground/{session.id}/files/delete?path=/workspace/output/answer.txt")
    assert "Delete /workspace/output/answer.txt?" in tab.get_by_role("alertdialog").inner_text()
    assert serious(tab) == []
    shot(tab, "session-files-delete-mobile.png")
    tab.get_by_role("button", name="Delete").click()
    tab.get_by_text("Deleted /workspace/output/answer.txt.").wait_for()

    # A link in /workspace to /etc/shadow is listed, never followed.
    sessions.exec_command(group.tenant, group.contributor, session,
                          "ln -sf /etc/shadow /workspace/output/shadow")
    tab.goto(f"/playground/{session.id}/files?path=/workspace/output")
    tab.locator(".files-link", has_text="shadow").wait_for()
    assert tab.get_by_role("link", name="shadow").count() == 0
    tab.goto(f"/playground/{session.id}/files/download?path=/workspace/output/shadow")
    tab.get_by_text("leads outside /workspace through a link").wait_for()
    assert "root:" not in tab.content()

    tab.goto(f"/playground/{fresh.id}/files")
    tab.get_by_text("No sandbox yet").wait_for()
    assert serious(tab) == []
