"""Security headers on every response, and templates that need no 'unsafe-inline' or
'unsafe-eval' to run under the Content-Security-Policy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import factories

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def csp_directives(response) -> dict[str, list[str]]:
    policy = response.headers.get("Content-Security-Policy", "")
    directives = {}
    for part in filter(None, (p.strip() for p in policy.split(";"))):
        name, *values = part.split()
        directives[name] = values
    return directives


def assert_secure_headers(response, label: str) -> None:
    for name, value in EXPECTED.items():
        assert response.headers.get(name) == value, f"{label}: {name}={response.headers.get(name)}"
    csp = csp_directives(response)
    assert csp.get("default-src") == ["'self'"], label
    assert csp.get("script-src") == ["'self'"], label
    assert csp.get("style-src") == ["'self'"], label
    assert csp.get("frame-ancestors") == ["'none'"], label
    assert csp.get("object-src") == ["'none'"] and csp.get("base-uri") == ["'none'"], label
    assert csp.get("form-action") == ["'self'"], label
    assert not [v for values in csp.values() for v in values
                if v in ("'unsafe-inline'", "'unsafe-eval'", "*", "http:", "https:")], label


@pytest.mark.parametrize("path", ["/login", "/static/js/app.js", "/static/vendor/htmx.min.js",
                                  "/no/such/page", "/api/v1/auth/me", "/api/v1/openapi.json",
                                  "/", "/members"])
def test_anonymous_responses_carry_the_headers(client, path):
    assert_secure_headers(client.get(path), path)


def test_signed_in_pages_htmx_fragments_and_api_errors_carry_the_headers(two_tenants, login_as,
                                                                          bearer):
    a, _ = two_tenants
    browser = login_as(a.owner, a.tenant)
    for path in ("/", "/members", "/sandboxes", "/skills", "/playground", "/api-keys",
                 "/account"):
        assert_secure_headers(browser.get(path), path)
        assert_secure_headers(browser.get(path, headers={"HX-Request": "true"}), f"htmx {path}")
    api = bearer(a.owner, a.tenant)
    assert_secure_headers(api.get("/api/v1/auth/me"), "api me")
    assert_secure_headers(api.post("/api/v1/auth/login", data=b"[" * 5000,
                                   content_type="application/json"), "api 400")


def test_a_failed_sign_in_carries_the_headers(client):
    user = factories.make_user("hdr@example.test", factories.make_tenant("Headers"))
    response = client.post("/api/v1/auth/login", json={"email": user.email, "password": "x"})
    assert response.status_code == 401
    assert_secure_headers(response, "401")


INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I), "inline <script>"),
    (re.compile(r"<style\b", re.I), "<style> element"),
    (re.compile(r"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "inline event handler"),
    (re.compile(r"hx-on|hx-vars|(?:hx-vals|hx-headers)\s*=\s*['\"]\s*(?:js|javascript):", re.I),
     "htmx attribute evaluated as JavaScript"),
    (re.compile(r"hx-trigger\s*=\s*\"[^\"]*\[", re.I), "htmx trigger filter (needs eval)"),
    (re.compile(r"javascript:", re.I), "javascript: URL"),
]


def test_no_template_needs_unsafe_inline_or_eval():
    problems = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        source = path.read_text()
        for pattern, what in INLINE:
            for match in pattern.finditer(source):
                line = source.count("\n", 0, match.start()) + 1
                problems.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not problems, "\n".join(problems)


def test_htmx_is_told_not_to_eval_or_inject_styles():
    base = (ROOT / "templates" / "base.html").read_text()
    assert '"allowEval": false' in base and '"includeIndicatorStyles": false' in base
