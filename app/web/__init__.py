"""The server-rendered console (Jinja2 + htmx): one URL serves a page or its fragment.

One blueprint, `web`; the modules below (grouped by domain in subpackages) register
their routes on it when imported, so endpoint names are `web.<view function>`.
"""

from flask import Blueprint

bp = Blueprint("web", __name__)

from app.web import _format, activity, dashboard, egress, jobs, personal_env  # noqa: E402,F401
from app.web.identity import account, api_keys, auth, invitations, members  # noqa: E402,F401
from app.web.playground import console, files, runs, terminal  # noqa: E402,F401
from app.web.sandboxes import check, configs, editor, sessions, templates  # noqa: E402,F401
from app.web.skills import catalog, manage  # noqa: E402,F401
