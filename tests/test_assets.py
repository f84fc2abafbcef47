"""Static assets and compression (issue 15 item 8): responses are compressed when the
client asks (br or gzip), static URLs carry a content hash and are cached for a year,
the favicon is served, and event streams are never compressed (tests/streams and
tests/runs check that they still stream with compression offered)."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import brotli
import pytest

from app.assets import IMMUTABLE, Fingerprints

ROOT = Path(__file__).resolve().parent.parent
CSS = ROOT / "static" / "css" / "app.css"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


@pytest.mark.parametrize("encoding, decode", [("br", brotli.decompress),
                                              ("gzip", gzip.decompress)])
def test_static_files_are_compressed_as_negotiated(client, encoding, decode):
    response = client.get(f"/static/css/app.css?v={digest(CSS)}",
                          headers={"Accept-Encoding": encoding})
    assert response.status_code == 200
    assert response.headers["Content-Encoding"] == encoding
    assert "Accept-Encoding" in response.headers["Vary"]
    assert decode(response.get_data()) == CSS.read_bytes()
    assert int(response.headers["Content-Length"]) < CSS.stat().st_size


def test_br_is_preferred_and_identity_when_not_asked(client):
    both = client.get("/static/css/app.css", headers={"Accept-Encoding": "gzip, br"})
    assert both.headers["Content-Encoding"] == "br"
    plain = client.get("/static/css/app.css", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers
    assert plain.get_data() == CSS.read_bytes()


def test_pages_and_api_json_are_compressed(two_tenants, login_as, bearer):
    a, _ = two_tenants
    page = login_as(a.admin, a.tenant).get("/", headers={"Accept-Encoding": "gzip"},
                                          follow_redirects=True)
    assert page.status_code == 200 and page.headers["Content-Encoding"] == "gzip"
    assert b"<html" in gzip.decompress(page.get_data())
    api = bearer(a.admin, a.tenant)
    response = api.get("/api/v1/openapi.json", headers={"Accept-Encoding": "br"})
    assert response.headers["Content-Encoding"] == "br"
    assert brotli.decompress(response.get_data()).startswith(b"{")


def test_pages_link_fingerprinted_assets_and_the_favicon(client):
    html = client.get("/login").get_data(as_text=True)
    assert f"/static/css/app.css?v={digest(CSS)}" in html
    favicon = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)"', html)
    assert favicon and "/static/favicon.svg?v=" in favicon.group(1)
    response = client.get(favicon.group(1))
    assert response.status_code == 200 and response.mimetype == "image/svg+xml"
    assert response.headers["Cache-Control"] == IMMUTABLE


def test_current_fingerprint_is_immutable_others_revalidate(client):
    fresh = client.get(f"/static/css/app.css?v={digest(CSS)}")
    assert fresh.headers["Cache-Control"] == IMMUTABLE
    assert "max-age=31536000" in IMMUTABLE and "immutable" in IMMUTABLE
    for stale in ("/static/css/app.css", "/static/css/app.css?v=000000000000"):
        assert client.get(stale).headers["Cache-Control"] == "no-cache"


def test_fingerprint_changes_when_the_file_changes(tmp_path):
    prints = Fingerprints(str(tmp_path))
    (tmp_path / "a.css").write_text("body { color: black }")
    before = prints.of("a.css")
    assert before == prints.of("a.css")  # cached while unchanged
    (tmp_path / "a.css").write_text("body { color: navy }")
    after = prints.of("a.css")
    assert after and after != before
    assert after == hashlib.sha256(b"body { color: navy }").hexdigest()[:12]
    assert prints.of("../etc/passwd") is None and prints.of("missing.css") is None


def test_small_and_error_responses_are_left_alone(client):
    assert "Content-Encoding" not in client.get(
        "/static/nope.css", headers={"Accept-Encoding": "gzip"}).headers
