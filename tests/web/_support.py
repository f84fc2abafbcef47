"""Request helpers for the web tests: form posts with the CSRF token, htmx headers."""

from __future__ import annotations

import re

from tests.conftest import csrf_token

KEY_PATTERN = re.compile(r"sl_[0-9a-f]{8}_[A-Za-z0-9_\-]{20,}")


def htmx_headers(client, path: str = "/") -> dict[str, str]:
    """What htmx sends: HX-Request, and the CSRF token from the page's hx-headers."""
    return {"HX-Request": "true", "X-CSRFToken": csrf_token(client, path)}


def post_form(client, path: str, data: dict | None = None, *, htmx: bool = False,
              token_from: str = "/"):
    """A form POST as the browser sends it: with the token field, or as htmx with headers."""
    if htmx:
        return client.post(path, data=data or {}, headers=htmx_headers(client, token_from))
    return client.post(path, data={"csrf_token": csrf_token(client, token_from), **(data or {})})


def text(response) -> str:
    return response.get_data(as_text=True)


def confirm(page) -> str:
    """Say yes in the confirmation popover (our own, anchored to the button that asked; an
    hx-confirm no longer opens a browser dialog) and return its question."""
    box = page.locator(".popover[role=alertdialog]")
    box.wait_for()
    question = box.locator(".popover-text").inner_text()
    box.locator("[data-popover-confirm]").click()
    box.wait_for(state="detached")
    return question
