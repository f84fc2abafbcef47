"""Issue 9 item 3: a sandbox check is not a port scanner. Whatever a tenant aims it at, the
answer (API response, job, and the editor's check page) never carries the address, port,
path or errno text of a failed connection; the operator's log has it, under the
reference id the tenant is given."""

from __future__ import annotations

import re
import socket

import pytest

from tests.factories import config_doc
from tests.web._support import post_form, text
from tests.web.test_sandbox_check_ui import poll

CHECK = "/api/v1/system/sandbox-check"
LEAKS = re.compile(r"127\.0\.0\.1|10\.20\.30\.40|169\.254|Errno|refused|/tmp/|/var/|"
                   r"localhost|[A-Za-z\]]:\d{2,5}\b")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def e2b_doc(api_url: str) -> dict:
    return config_doc("e2b", {"api_key": "topology-key-123", "api_url": api_url})


def e2b_form(api_url: str) -> dict:
    return {"name": "probe", "sandbox_type": "e2b", "allow_private_endpoints": "y",
            "e2b.api_key": "topology-key-123", "e2b.template_id": "base",
            "e2b.api_url": api_url}


def leaks(page: str, port: int | None = None) -> list[str]:
    found = LEAKS.findall(page)
    if port is not None and str(port) in page:
        found.append(str(port))
    return found


@pytest.fixture
def admin(two_tenants):
    return two_tenants[0]


def test_a_closed_loopback_port_is_reported_without_its_address(app, admin, bearer, login_as,
                                                                monkeypatch, caplog):
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", True)
    port = closed_port()
    api_url = f"http://127.0.0.1:{port}"
    api = bearer(admin.admin, admin.tenant)

    response = api.post(CHECK, json={"config": e2b_doc(api_url)})
    job = api.get(f"/api/v1/jobs/{response.json['data']['job_id']}")
    client = login_as(admin.admin, admin.tenant)
    first = post_form(client, "/sandboxes/check", e2b_form(api_url), htmx=True,
                      token_from="/sandboxes")
    page = text(poll(client, first)[-1])

    assert response.status_code == 200, response.json
    row = next(r for r in response.json["data"]["checks"] if r["name"] == "api_url_reachable")
    assert row["ok"] is False
    # Issue 27 item 4: fields by the form's labels, never by their JSON keys.
    assert row["message"].startswith("The E2B API (its API URL) could not be reached; check "
                                     "the API URL")
    for body in (response.get_data(as_text=True), text(job), page):
        # The JSON echoes nothing of the config; the page only the check rows.
        assert not leaks(body.replace("api_url_reachable", ""), port), body
    assert "could not be reached" in page and "reference" in page
    reference = re.search(r"reference ([0-9a-f]{8})", row["message"]).group(1)
    logged = [r.getMessage() for r in caplog.records if reference in r.getMessage()]
    assert logged and str(port) in logged[0]  # the operator can still find the detail


@pytest.mark.parametrize(("operator_allows", "api_url"), [
    (False, "http://10.20.30.40:2375"),
    (False, "http://localhost:2375"),
    (True, "http://169.254.169.254:80"),
    (True, "http://[fd00:ec2::254]:80"),
], ids=["private-not-allowed", "name-resolving-to-loopback", "metadata", "metadata-v6"])
def test_a_refused_address_is_refused_without_naming_it(app, admin, bearer, login_as,
                                                        monkeypatch, operator_allows, api_url):
    monkeypatch.setitem(app.config, "SANDBOX_ALLOW_PRIVATE_ENDPOINTS", operator_allows)
    api = bearer(admin.admin, admin.tenant)

    response = api.post(CHECK, json={"config": e2b_doc(api_url)})
    client = login_as(admin.admin, admin.tenant)
    page = post_form(client, "/sandboxes/check", e2b_form(api_url), htmx=True,
                     token_from="/sandboxes")

    assert response.status_code == 400
    [error] = response.json["error"]["data"]["errors"]
    assert error["field"] == "e2b.api_url"
    assert page.status_code == 400 and "unsafe outbound URL" in text(page)
    for body in (response.get_data(as_text=True), text(page)):
        assert not leaks(body.replace(api_url, "")), body  # only what the tenant typed
