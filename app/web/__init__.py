"""The server-rendered console (Jinja2 + htmx): one URL serves a page or its fragment."""

from flask import Blueprint

bp = Blueprint("web", __name__)

from app.web import (  # noqa: E402,F401
    _format,
    account,
    activity,
    api_keys,
    auth,
    dashboard,
    invitations,
    jobs,
    members,
    personal_env,
    playground,
    playground_runs,
    sandbox_check,
    sandbox_sessions,
    sandbox_templates,
    sandboxes,
    skill_manage,
    skills,
)
