"""The JSON REST API under /api/v1."""

from flask import Blueprint

bp = Blueprint("api", __name__, url_prefix="/api/v1")

from app.api import (  # noqa: E402,F401
    api_keys,
    auth,
    egress,
    install_streams,
    installed_skills,
    invitations,
    jobs,
    members,
    openapi,
    personal_env,
    runs,
    sandbox_configs,
    sessions,
    skills,
    system,
    terminals,
    workspace_sessions,
)
