"""Settings -> Personal variables (reference 10.3): a member's own values for skills'
declared variables and config-wide variables. Values are write-only: the page never
renders one, not even in an attribute, and identity is the signed-in member only."""

from __future__ import annotations

from collections.abc import Callable

from flask import g, request, url_for

from app.auth.guards import guard
from app.errors import AppError
from app.extensions import db
from app.services.personal import values as service
from app.tenancy import current_tenant
from app.web import bp
from app.web._helpers import done, page_or_fragment

PAGE, PANEL = "personal/index.html", "personal/_panel.html"


def _who() -> service.Who:
    return service.Who.user(current_tenant(), g.principal.user)


def _context() -> dict:
    return {"tenant": current_tenant(), "groups": service.list_groups(_who()),
            "name_hint": service.NAME_HINT}


def _field(name: str) -> str:
    return (request.form.get(name) or "")[:service.VALUE_MAX_BYTES + 1]


def _act(action: Callable[[], None], message: str):
    """Run one write; either way htmx gets the fresh panel and a notice (never a value)."""
    back = url_for("web.personal_variables")
    try:
        action()
    except AppError as err:
        db.session.rollback()
        return done(err.message, PANEL, back, err.status, category="error", **_context())
    return done(message, PANEL, back, **_context())


@bp.get("/personal-variables")
@guard(None)
def personal_variables():
    return page_or_fragment(PAGE, PANEL, **_context())


@bp.post("/personal-variables/skill")
@guard(None)
def set_personal_skill_variable():
    name = _field("name").strip()
    return _act(lambda: service.set_skill_value(_who(), _field("skill_id"), name,
                                                _field("value")),
                f"Saved your value for {name}.")


@bp.post("/personal-variables/skill/clear")
@guard(None)
def clear_personal_skill_variable():
    name = _field("name").strip()
    return _act(lambda: service.delete_skill_value(_who(), _field("skill_id"), name),
                f"Cleared your value for {name}.")


@bp.post("/personal-variables/sandbox")
@guard(None)
def set_personal_sandbox_variable():
    name = _field("name").strip()
    return _act(lambda: service.set_config_value(_who(), _field("sandbox_config_id"), name,
                                                 _field("value")),
                f"Saved {name}.")


@bp.post("/personal-variables/sandbox/delete")
@guard(None)
def delete_personal_sandbox_variable():
    name = _field("name").strip()
    return _act(lambda: service.delete_config_value(_who(), _field("sandbox_config_id"), name),
                f"Deleted {name}.")
