"""The `browser` marker for the Playwright journeys."""

from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives the UI in headless Chromium against the live server",
    )
