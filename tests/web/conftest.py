"""Fixtures for the browser UI tests: each test-client request in its own app context,
and the `browser` marker for the Playwright journeys."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives the UI in headless Chromium against the live server",
    )


@pytest.fixture(autouse=True)
def _request_in_own_app_context(monkeypatch) -> None:
    """Run every test-client request in a fresh app context, as a real server does.

    The autouse `_context` fixture keeps one app context open for the whole test, and the
    test client reuses it: then `g` (Flask-Login's cached user, our principal, the CSRF
    token) leaks from one client's request into the next client's. tests/sweeps does the
    same per call (routes.call).
    """
    original = FlaskClient.open

    def open_in_own_context(self, *args, **kwargs):
        with self.application.app_context():
            response = original(self, *args, **kwargs)
            response.get_data()  # buffer the body before the context goes
            return response

    monkeypatch.setattr(FlaskClient, "open", open_in_own_context)
