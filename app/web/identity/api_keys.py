"""API keys: list, create (the plaintext is shown once, in the create response), revoke."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import parse_qs, urlsplit

from flask import request, url_for
from flask_wtf import FlaskForm
from wtforms import BooleanField, DateField, SelectMultipleField, StringField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Length, Optional
from wtforms.widgets import CheckboxInput, ListWidget

from app.auth.guards import guard
from app.auth.pepper import api_key_pepper
from app.errors import AppError
from app.extensions import htmx
from app.models import ApiKey, Role
from app.models.types import utcnow
from app.services.identity import api_keys as key_service
from app.tenancy import current_tenant, get_or_404, principal
from app.web import bp
from app.web._helpers import attach_error, confirm_page, done, page_or_fragment

CAPABILITY_HELP = {
    "manage_vector_stores": "Test a sandbox config's connection through the API (the "
                            "sandbox check, deep or not). Nothing else.",
}


class CreateKeyForm(FlaskForm):
    name = StringField("Name", validators=[
        DataRequired(message="Give the key a name."), Length(max=100),
    ])
    full_access = BooleanField("Full access")
    capabilities = SelectMultipleField(
        "Capabilities", choices=[SelectChoice(c) for c in key_service.CAPABILITIES],
        widget=ListWidget(prefix_label=False), option_widget=CheckboxInput(),
    )
    expires_at = DateField("Expires on", validators=[Optional()])


def expiry_of(day: date | None) -> datetime | None:
    """A key set to expire on a day works until the end of that day (UTC)."""
    if day is None:
        return None
    return datetime.combine(day + timedelta(days=1), time.min, tzinfo=UTC)


PER_PAGE = 50  # as the Members page


def _page_number() -> int:
    """The page: from the query string, or (after an htmx post) the page's URL, so a revoke
    on page 2 shows page 2 again."""
    args = {"page": request.args.getlist("page")}
    if htmx and request.method == "POST" and htmx.current_url:
        args = parse_qs(urlsplit(htmx.current_url).query)
    raw = (args.get("page") or ["1"])[0]
    return int(raw) if raw.isdigit() and len(raw) < 7 else 1


def _context(form: CreateKeyForm | None = None, created=None) -> dict:
    listing = key_service.page_keys(current_tenant(), _page_number(), PER_PAGE)
    return {
        "tenant": current_tenant(), "keys": listing.rows, "listing": listing,
        "form": form or CreateKeyForm(formdata=None), "created": created, "now": utcnow(),
        "capability_help": CAPABILITY_HELP,
    }


@bp.get("/api-keys")
@guard(Role.admin)
def api_keys():
    return page_or_fragment("api_keys/index.html", "api_keys/_table.html", **_context())


@bp.post("/api-keys")
@guard(Role.admin)
def create_api_key():
    form = CreateKeyForm()
    status = 400
    if form.validate_on_submit():
        try:
            key, plaintext = key_service.create_key(
                current_tenant(), principal(), name=form.name.data,
                full_access=form.full_access.data, capabilities=form.capabilities.data or [],
                expires_at=expiry_of(form.expires_at.data), pepper=api_key_pepper(),
            )
        except AppError as err:
            attach_error(form, err)
            status = err.status
        else:
            # The plaintext lives only in this response: never in the session, a flash or a log.
            response = page_or_fragment("api_keys/index.html", "api_keys/_panel.html", 201,
                                        **_context(created=(key, plaintext)))
            return (*response, {"Cache-Control": "no-store"})
    return page_or_fragment("api_keys/index.html", "api_keys/_panel.html", status,
                            **_context(form))


@bp.get("/api-keys/<int:key_id>/revoke")
@guard(Role.admin)
def confirm_revoke_api_key(key_id: int):
    """Without JavaScript the Revoke button lands here and asks first."""
    key = get_or_404(ApiKey, key_id, "API key")
    return confirm_page(f"Revoke “{key.name}”?", "Revoke",
                        url_for("web.revoke_api_key", key_id=key.id), url_for("web.api_keys"),
                        "Anything using it stops working at once.")


@bp.post("/api-keys/<int:key_id>/revoke")
@guard(Role.admin)
def revoke_api_key(key_id: int):
    key = get_or_404(ApiKey, key_id, "API key")
    try:
        key_service.revoke_key(current_tenant(), principal(), key)
    except AppError as err:
        return done(err.message, "api_keys/_table.html", url_for("web.api_keys"), err.status,
                    category="error", **_context())
    return done(f"Revoked “{key.name}”. It stops working immediately.", "api_keys/_table.html",
                url_for("web.api_keys"), **_context())
