"""The server-rendered dashboard (Jinja2 + htmx)."""

from flask import Blueprint

bp = Blueprint("web", __name__)

from app.web import auth, dashboard  # noqa: E402,F401
