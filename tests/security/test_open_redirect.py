"""The login redirect goes only to a same-site relative path, whatever the spelling of `next`."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest

from app.web.redirects import safe_next
from tests import factories

HOSTILE = [
    "//evil.example", "//evil.example/x", "/\\evil.example", "\\\\evil.example",
    "/\t/evil.example", "/%09/evil.example", "/%5C/evil.example", "/%5c/evil.example",
    "/%2F/evil.example", "/%2f%2fevil.example", "%2F%2Fevil.example", "/%252F/evil.example",
    "https://evil.example", "HTTPS://evil.example/", "http:evil.example", "//\tevil.example",
    "javascript:alert(1)", "JaVaScRiPt:alert(1)", " javascript:alert(1)", "data:text/html,x",
    "/\n/evil.example", "/\r/evil.example", "/\x00/evil.example", "/\x0b/evil.example",
    "\x01//evil.example", "/ /evil.example", "/\u3000/evil.example", "/\u2028/evil.example",
    "evil.example", "./evil", "../x", "", "  ", "/\\/evil.example", "/./\\evil.example",
    "/%E3%80%80/evil.example", "/%0a/evil.example", "///evil.example",
]
SAME_SITE = ["/", "/members", "/sandboxes?tab=mine", "/jobs/abc#top", "/skills/x%20y"]


@pytest.mark.parametrize("target", HOSTILE, ids=repr)
def test_a_hostile_next_falls_back_to_the_dashboard(app, target):
    with app.test_request_context():
        assert safe_next(target) == "/"


@pytest.mark.parametrize("target", SAME_SITE)
def test_a_same_site_path_is_kept(app, target):
    with app.test_request_context():
        assert safe_next(target) == target


@pytest.mark.parametrize("target", ["/%09/evil.example", "//evil.example", "/%5C/evil.example",
                                    "https://evil.example", "/%252F%252Fevil.example"])
def test_signing_in_never_redirects_off_site(client, target):
    user = factories.make_user("redirect@example.test", factories.make_tenant("Redirects"))
    page = client.get("/login").get_data(as_text=True)
    token = page.split('name="csrf_token" type="hidden" value="', 1)[1].split('"', 1)[0]
    response = client.post(f"/login?next={quote(target, safe='%')}",
                           data={"csrf_token": token, "email": user.email,
                                 "password": factories.PASSWORD})
    assert response.status_code == 302
    location = response.headers["Location"]
    parts = urlsplit(location)
    assert not parts.scheme and not parts.netloc, location
    assert location.startswith("/") and not location.startswith("//"), location
    assert "\\" not in location and "\t" not in location and "%09" not in location.lower()


def test_signing_in_keeps_a_same_site_next(client):
    user = factories.make_user("redirect2@example.test", factories.make_tenant("Redirects 2"))
    page = client.get("/login").get_data(as_text=True)
    token = page.split('name="csrf_token" type="hidden" value="', 1)[1].split('"', 1)[0]
    response = client.post("/login?next=/members", data={
        "csrf_token": token, "email": user.email, "password": factories.PASSWORD})
    assert response.headers["Location"] == "/members"
