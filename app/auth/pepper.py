"""The secret mixed into API key digests: one definition for the loaders, API, web and CLI."""

from __future__ import annotations

from flask import current_app


def api_key_pepper() -> str:
    """API_KEY_PEPPER when set, else SECRET_KEY (changing either invalidates every key)."""
    return current_app.config.get("API_KEY_PEPPER") or current_app.config["SECRET_KEY"]
