"""The editor drawer's "Test connection" and "Deep check": the buttons post the form as it
stands, the answer is a fragment that polls its job until it ends with 286 and shows the
rows (ok / failed / skipped with reason, message, latency)."""

from __future__ import annotations

import re
import time

import pytest

from app.models import Job
from app.services import audit
from app.services.sandboxes import configs as service
from tests.backends.conftest import BASE_IMAGE, require_docker
from tests.web._support import htmx_headers, post_form, text

NO_ENGINE = "unix:///tmp/sandlot-no-engine.sock"
FORM = {"name": "Local Docker", "sandbox_type": "docker", "docker.image": BASE_IMAGE,
        "docker.network_mode": "bridge"}
POLL = re.compile(r'hx-get="(/sandboxes/checks/[0-9a-f-]{36})" hx-trigger="every 1s"')


@pytest.fixture(autouse=True)
def _engine():
    require_docker()


@pytest.fixture
def group(two_tenants):
    return two_tenants[0]


def poll(client, first, seconds: float = 60):
    """Follow the fragment's own polling until it answers 286; every answer on the way."""
    answers = [first]
    match = POLL.search(text(first))
    while match:
        deadline = time.monotonic() + seconds
        response = client.get(match.group(1), headers={"HX-Request": "true"})
        answers.append(response)
        if response.status_code == 286:
            assert POLL.search(text(response)) is None  # a terminal fragment polls no more
            break
        assert response.status_code == 200
        assert time.monotonic() < deadline
        time.sleep(0.3)
    return answers


def test_the_editor_drawer_offers_both_checks(group, login_as):
    row = service.create_config(group.tenant, audit.SystemActor("t"), "Local Docker", "",
                                {"sandbox_type": "docker", "docker": {"image": BASE_IMAGE}})
    client = login_as(group.admin, group.tenant)
    for path in ("/sandboxes/new", f"/sandboxes/{row.id}/edit"):
        page = text(client.get(path, headers={"HX-Request": "true"}))
        assert 'id="sandbox-check"' in page
        assert "Test connection" in page and "Deep check" in page
        assert page.count('hx-post="/sandboxes/check"') == 2
        assert "hx-confirm=\"The deep check creates a real sandbox" in page
    assert f'name="config_id" value="{row.id}"' in page  # an edit posts the stored id too


def test_test_connection_polls_until_done_and_shows_the_rows(group, login_as):
    client = login_as(group.admin, group.tenant)

    first = client.post("/sandboxes/check", data={**FORM, "deep": "0"},
                        headers=htmx_headers(client, "/sandboxes"))

    assert first.status_code == 202
    answers = poll(client, first)
    last = text(answers[-1])
    assert answers[-1].status_code == 286
    assert "Connection test" in last and "Passed" in last
    for label in ("Control plane reachable", "Engine access", "Template available"):
        assert label in last
    assert last.count('class="check-row is-ok"') == 3
    assert last.count('class="check-row is-skipped"') == 2
    assert "Runs in the deep check only" in last and " ms</span>" in last
    assert "needs_deep_check" not in last and "<details" in last  # words, collapsible
    assert f"Image {BASE_IMAGE} is on the engine." in last


def test_an_edit_checks_unsaved_values_over_the_stored_config(group, login_as):
    row = service.create_config(group.tenant, audit.SystemActor("t"), "Local Docker", "",
                                {"sandbox_type": "docker", "docker": {"image": BASE_IMAGE},
                                 "env_vars": {"TOKEN": "stored-secret-value"}})
    client = login_as(group.admin, group.tenant)
    form = {**FORM, "config_id": row.id, "docker.image": "sandlot/sandbox:busybox",
            "env_vars[0].key": "TOKEN", "env_vars[0].value": ""}

    first = post_form(client, "/sandboxes/check", form, htmx=True, token_from="/sandboxes")

    last = text(poll(client, first)[-1])
    assert "Image sandlot/sandbox:busybox is on the engine." in last
    job = Job.query.filter_by(kind="sandbox_check").one()
    assert job.target_id == row.id and "stored-secret-value" not in str(job.params)


def test_deep_check_with_the_engine_unreachable_shows_failed_and_skipped(group, login_as):
    client = login_as(group.admin, group.tenant)

    first = post_form(client, "/sandboxes/check", {**FORM, "docker.engine": "missing", "deep": "1"},
                      htmx=True, token_from="/sandboxes")

    last = text(poll(client, first)[-1])
    assert "Deep check" in last and "Failed" in last
    assert last.count('class="check-row is-failed"') == 1
    assert last.count("Not tried: the control plane could not be reached") == 4
    assert "The Docker engine “missing” could not be reached" in last
    assert NO_ENGINE.removeprefix("unix://") not in last  # the operator's path stays hidden


def test_invalid_settings_are_listed_and_nothing_runs(group, login_as):
    client = login_as(group.admin, group.tenant)

    response = post_form(client, "/sandboxes/check",
                         {**FORM, "docker.image": "", "network.deny_out[0]": "example.com",
                          "deep": "1"}, htmx=True, token_from="/sandboxes")

    assert response.status_code == 400
    body = text(response)
    assert "Not started" in body and "Image is required." in body
    assert "Denied destination 1: " in body  # named by label, not by `network.deny_out[0]`
    assert "docker.image" not in body and "network.deny_out[0]" not in body
    assert POLL.search(body) is None
    assert Job.query.count() == 0


def test_only_admins_check_and_see_checks(group, login_as):
    admin = login_as(group.admin, group.tenant)
    first = admin.post("/sandboxes/check", data={**FORM, "deep": "0"},
                       headers=htmx_headers(admin, "/sandboxes"))
    job_path = POLL.search(text(first)).group(1)
    poll(admin, first)
    viewer = login_as(group.viewer, group.tenant)
    response = viewer.post("/sandboxes/check", data=FORM,
                           headers=htmx_headers(viewer, "/sandboxes"))
    assert response.status_code == 403
    assert viewer.get(job_path).status_code == 403


def test_another_kind_of_job_is_not_a_check(group, login_as):
    from tests.sweeps.routes import PARAM_ROWS

    job_id = PARAM_ROWS["job_id"](group)  # a finished audit export
    client = login_as(group.admin, group.tenant)
    assert client.get(f"/sandboxes/checks/{job_id}").status_code == 404


def test_without_htmx_the_check_is_a_page(group, login_as):
    client = login_as(group.admin, group.tenant)
    response = post_form(client, "/sandboxes/check", {**FORM, "deep": "0"}, token_from="/sandboxes")
    assert response.status_code == 303  # to the check's page (issue 27 item 8)
    path = response.headers["Location"]
    page = client.get(path)
    assert "<h1>Sandbox check</h1>" in text(page)
    if "Passed" not in text(page):  # still running: the page reloads itself
        assert '<meta http-equiv="refresh" content="2">' in text(page)
        poll(client, client.get(path, headers={"HX-Request": "true"}))
    done = client.get(path)
    assert done.status_code == 200 and "Passed" in text(done)
    assert 'http-equiv="refresh"' not in text(done)


def stored_check(group, checks: list[dict], ok: bool) -> str:
    """A finished check job as the worker leaves it; its id."""
    import uuid

    from app.extensions import db
    from app.models import JobStatus

    job = Job(id=str(uuid.uuid4()), tenant_id=group.tenant.id, kind="sandbox_check",
              status=JobStatus.succeeded, params={"deep": True, "provider": "docker"}, log="",
              timeout_sec=60, result={"ok": ok, "provider": "docker", "deep": True,
                                      "checks": checks, "capabilities": {}})
    db.session.add(job)
    db.session.commit()
    return job.id


def egress_row(ok, reason: str, message: str, targets: list[tuple]) -> dict:
    return {"name": "egress_available", "ok": ok, "reason": reason, "message": message,
            "latency_ms": 40, "targets": [
                {"host": h, "listed": listed, "allowed": allowed, "reachable": reachable,
                 "detail": detail} for h, listed, allowed, reachable, detail in targets]}


def test_a_blocked_egress_row_is_not_called_not_tried_and_lists_what_it_tried(group,
                                                                               login_as):
    """Issue 27 item 4: the row the policy blocked was greyed as "Not tried" while its
    message listed what was tried."""
    job_id = stored_check(group, [egress_row(
        None, "egress_restricted_by_policy", "Restricted by policy: …",
        [("PyPI.org", False, False, False, "name not resolved")])], ok=True)
    page = text(login_as(group.admin, group.tenant).get(f"/sandboxes/checks/{job_id}"))

    assert 'class="check-row is-blocked"' in page and "Not tried" not in page
    assert "Blocked by the network policy" in page
    assert "PyPI.org" in page and "Denied · blocked (name not resolved)" in page
    assert ">Passed<" in page


def test_an_allowed_destination_down_is_a_warning_in_the_verdict(group, login_as):
    job_id = stored_check(group, [egress_row(
        True, "", "Reachable via a.example. Allowed but not reachable: b.example (timed out)",
        [("a.example", True, True, True, "HTTP 200"),
         ("b.example", True, True, False, "timed out")])], ok=True)
    page = text(login_as(group.admin, group.tenant).get(f"/sandboxes/checks/{job_id}"))

    assert "Passed with a warning" in page and 'class="check-row is-warn"' in page
    assert "Allowed · not reachable (timed out)" in page
    assert '<details class="check-details" open>' in page  # something to read: open
