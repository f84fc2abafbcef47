"""The home page: the workspace at a glance (issue 15 item 6)."""

from __future__ import annotations

from flask import render_template, url_for

from app.auth.guards import guard
from app.models import AuditEvent, Role
from app.models.types import utcnow
from app.services import dashboard as summary_service
from app.services import quotas
from app.services.identity import api_keys, members
from app.services.sandboxes import pools
from app.tenancy import current_tenant, principal
from app.web import bp
from app.web.sandboxes.configs import KIND_LABELS, OUTCOME_LABELS

# The same outcomes as counts ("2 passed"), for the per-backend line.
COUNT_LABELS = {"passed": "passed", "problems": "with problems", "checking": "checking now",
                "unfinished": "check did not finish", "never": "never checked"}
INSTALL_LABELS = {"failed": ("Install failed", "badge-danger"),
                  "installing": ("Installing", "badge-info"),
                  "removing": ("Removing", "badge-info")}
# Where an activity line leads, for admins (who can open every one of these pages).
EVENT_PAGES = {"sandbox_config": "web.sandboxes", "membership": "web.members",
               "invitation": "web.members", "user": "web.members", "api_key": "web.api_keys",
               "installed_skill": "web.skills", "skill_catalog": "web.skills",
               "session": "web.playground", "tenant": "web.sandboxes"}


def event_link(event: AuditEvent, admin: bool) -> str | None:
    """The page an activity line is about, when the viewer may open it."""
    endpoint = EVENT_PAGES.get(event.object_type)
    if endpoint is None or (not admin and endpoint in ("web.members", "web.api_keys")):
        return None
    return url_for(endpoint)


POOL_BADGES = {"ready": ("Ready", "badge-ok"), "filling": ("Filling", "badge-info"),
               "held back": ("Held back", "badge-warn"), "off": ("Off", "badge-muted")}


@bp.get("/dashboard/pools")
@guard()
def dashboard_pools():
    """The warm pools panel alone: it polls itself while a pool is filling."""
    return render_template("_dashboard_pools.html", pools=pools.status(current_tenant().id),
                           pool_badges=POOL_BADGES)


@bp.get("/")
@guard()
def dashboard():
    tenant, who = current_tenant(), principal()
    admin = who.role.at_least(Role.admin)
    active_keys = None
    if admin:
        now = utcnow()
        active_keys = sum(1 for key in api_keys.list_keys(tenant) if key.is_usable(now))
    summary = summary_service.summarise(tenant, who.user, everyone=admin)
    return render_template(
        "dashboard.html", tenant=tenant, members_count=members.count_members(tenant),
        active_keys=active_keys, summary=summary, recent=summary.recent,
        totals=summary_service.outcome_counts(summary), kinds=KIND_LABELS,
        outcome_labels=OUTCOME_LABELS, count_labels=COUNT_LABELS, install_labels=INSTALL_LABELS,
        event_link=event_link, quotas=quotas.usage(tenant, who.user.id),
        deployment_limits=quotas.deployment_limits(), pools=summary.pools,
        pool_badges=POOL_BADGES,
    )
