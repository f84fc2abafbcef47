"""The application factory. It only wires: no network, no migrations, no file writes."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, jsonify, redirect, render_template, request, url_for
from flask_limiter.errors import RateLimitExceeded
from flask_login import current_user
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from app.config import ROOT, BaseConfig, pick_config
from app.errors import (
    HTTP_TO_ERROR,
    AppError,
    BadRequest,
    Internal,
    RateLimited,
    Unauthorized,
)
from app.extensions import csrf, db, htmx, limiter, login_manager, migrate
from app.security.json_input import BoundedJSONProvider

log = logging.getLogger("sandlot")


def create_app(config: str | type[BaseConfig] | dict[str, Any] | None = None) -> Flask:
    """Build the app from a config name, class, or a dict of overrides (key ENV picks the base)."""
    app = Flask(
        __name__, template_folder=str(ROOT / "templates"), static_folder=str(ROOT / "static"),
        instance_path=str(ROOT / "instance"),
    )
    overrides = dict(config) if isinstance(config, dict) else {}
    base = config if isinstance(config, type) else pick_config(
        config if isinstance(config, str) else overrides.pop("ENV", None)
    )
    app.json = BoundedJSONProvider(app)  # every request.get_json parses with bounds
    app.config.from_object(base)
    app.config.update(overrides)
    base.validate(app.config)
    if app.config.get("TRUSTED_PROXY_COUNT"):  # the client address the proxies saw
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=app.config["TRUSTED_PROXY_COUNT"])

    _init_extensions(app)
    _register_blueprints(app)
    _register_errors(app)
    _register_hooks(app)
    from app import cli

    cli.register(app)
    return app


def _init_extensions(app: Flask) -> None:
    db.init_app(app)
    migrate.init_app(app, db, directory=str(ROOT / "migrations"), render_as_batch=True)
    login_manager.init_app(app)
    login_manager.login_view = "web.login"
    login_manager.session_protection = "basic"
    csrf.init_app(app)
    htmx.init_app(app)
    app.config["RATELIMIT_STORAGE_URI"] = (app.config.get("RATELIMIT_STORAGE_URI")
                                           or app.config.get("REDIS_URL") or "memory://")
    limiter.init_app(app)
    from app import assets

    assets.init_app(app)
    from app.jobs.queue import make_dispatcher

    app.extensions["sandlot_dispatcher"] = make_dispatcher(app)


def _register_blueprints(app: Flask) -> None:
    from app.api import bp as api_bp
    from app.auth import loaders  # noqa: F401  (registers the user loader)
    from app.web import bp as web_bp

    csrf.exempt(api_bp)  # the API takes bearer tokens and keys, never cookies
    app.register_blueprint(api_bp)
    app.register_blueprint(web_bp)


def _register_errors(app: Flask) -> None:
    @app.errorhandler(AppError)
    def on_app_error(err: AppError):
        return render_error(err)

    @app.errorhandler(CSRFError)
    def on_csrf(err: CSRFError):
        # CSRF runs before the guard: a request whose session is gone fails here first,
        # and the right answer to it is the login page, not "form expired".
        if not current_user.is_authenticated:
            return render_error(Unauthorized())
        return render_error(BadRequest("The form expired. Reload the page and try again."))

    @app.errorhandler(RateLimitExceeded)
    def on_rate_limited(err: RateLimitExceeded):
        if request.endpoint == "web.login":
            from app.web.identity.auth import rate_limited_page

            return rate_limited_page()
        return render_error(RateLimited())

    @app.errorhandler(HTTPException)
    def on_http(err: HTTPException):
        kind = HTTP_TO_ERROR.get(err.code or 500, Internal)
        return render_error(kind(None if err.code in HTTP_TO_ERROR else err.description))

    @app.errorhandler(Exception)
    def on_unexpected(err: Exception):
        log.exception("unhandled error on %s %s", request.method, request.path)
        db.session.rollback()
        return render_error(Internal())


def render_error(err: AppError):
    """The one envelope for the API; an htmx fragment or an error page for the browser."""
    if request.path.startswith("/api/"):
        return jsonify(err.envelope()), err.status
    if err.status == 401:
        back = request.full_path.rstrip("?") if request.method == "GET" else None
        login = url_for("web.login", next=back)
        if htmx:
            return "", 204, {"HX-Redirect": login}
        return redirect(login)
    if htmx:
        headers = {"HX-Retarget": "#flashes", "HX-Reswap": "beforeend"}
        return render_template("_error.html", error=err), err.status, headers
    return render_template("error.html", error=err), err.status


def _register_hooks(app: Flask) -> None:
    policy = app.config["CONTENT_SECURITY_POLICY"]

    @app.after_request
    def vary_on_htmx(response):
        response.vary.add("HX-Request")  # add to Vary, never overwrite it
        # On every response, error pages and static files included: what a browser does
        # with any of them is decided by these.
        response.headers.setdefault("Content-Security-Policy", policy)
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if request.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response
