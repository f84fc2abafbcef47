"""Template filters and globals for the HTML views: dates, roles, audit event sentences."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from flask import g, request

from app.auth import loaders
from app.models import AuditEvent, Role
from app.models.types import utcnow
from app.web import bp


@bp.app_context_processor
def globals_for_templates() -> dict[str, Any]:
    who = _layout_principal()
    signed_in = who is not None and who.user is not None
    return {
        "Role": Role,
        "who": who if signed_in else None,
        "is_admin": bool(signed_in and who.role.at_least(Role.admin)),
        "role_help": ROLE_HELP, "capability_labels": CAPABILITY_LABELS,
    }


# What each role can really do, read from the guard table (tests/web/test_role_words.py
# holds these to it): no route asks for more than viewer but less than admin, so a
# contributor can do what a viewer can and nothing more (the pages no longer offer it).
ROLE_HELP = {
    "viewer": "Sees the sandbox configs and skills, runs commands in their own sessions "
              "and keeps personal variables. Cannot change the workspace.",
    "contributor": "The same as a viewer in Sandlot: sees configs and skills and runs "
                   "commands in their own sessions. Cannot change the workspace. New "
                   "invitations offer Viewer instead.",
    "admin": "Also adds, changes and deletes sandbox configs and skills, runs connection "
             "checks, and manages members, invitations and API keys.",
    "owner": "Everything an admin can do, and makes or removes owners.",
}
# An API key's capability by what it allows (its code stays in the API).
CAPABILITY_LABELS = {"manage_vector_stores": "Run sandbox checks"}


def _layout_principal():
    """Who the sidebar is for. Guarded views set it; an error page for an unknown URL ran
    no guard, so look the session up (never an API credential) to keep the navigation."""
    who = g.get("principal")
    if who is not None or request.path.startswith("/api/"):
        return who
    try:
        return loaders.load_web_principal()
    except Exception:  # an error page must render even when the session cannot be read
        return None


@bp.app_template_filter("datetime")
def format_datetime(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "—"


@bp.app_template_filter("date")
def format_date(value: datetime | None) -> str:
    """The day in UTC, saying so: the browser replaces it with the viewer's own day
    (static/js/local-time.js) wherever it sits in a <time data-local="date">."""
    return f"{value.day} {value.strftime('%b %Y')} UTC" if value else "—"


@bp.app_template_filter("last_moment")
def last_moment(value: datetime) -> datetime:
    """An expiry as the last moment it still holds: a key "expiring on 30 Jun" stops at
    00:00 on 1 Jul (UTC), and is shown as 30 Jun 23:59, not as 1 Jul."""
    return value - timedelta(minutes=1)


@bp.app_template_filter("ago")
def format_ago(value: datetime | None, now: datetime | None = None) -> str:
    """A short relative time for recent moments; the date for older ones."""
    if value is None:
        return "never"
    seconds = int(((now or utcnow()) - value).total_seconds())
    if seconds < 45:
        return "just now"
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    if seconds < 2 * 86400:
        return "yesterday"
    if seconds < 7 * 86400:
        return f"{seconds // 86400} days ago"
    return format_date(value)


_SENTENCES = {
    "member.added": "added {email} as {role}",
    "member.role_changed": "changed {email} from {from} to {to}",
    "member.removed": "removed {email} ({role})",
    "personal_env.forgotten": "deleted {count} personal variable value(s) of a departing member",
    "invitation.created": "invited {email} as {role}",
    "invitation.revoked": "revoked the invitation of {email}",
    "invitation.accepted": "joined as {role} by invitation",
    "api_key.created": "created API key “{name}” (sl_{prefix}_…)",
    "api_key.revoked": "revoked API key “{name}” (sl_{prefix}_…)",
    "sandbox_config.created": "added sandbox config “{name}” ({sandbox_type})",
    "sandbox_config.updated": "updated sandbox config “{name}”",
    "sandbox_config.deleted": "deleted sandbox config “{name}”",
    "skill_catalog.created": "added skill “{name}” to the catalog",
    "skill_catalog.updated": "registered a new bundle of skill “{name}”",
    "skill_catalog.deleted": "deleted skill “{name}” from the catalog",
    "skill_catalog.installed": "started installing skill “{name}”",
    "skill_catalog.categories": "set the categories of skill “{name}”",
    "session.created": "opened a sandbox session",
    "session.deleted": "ended a sandbox session",
    "installed_skill.reinstalled": "reinstalled skill “{name}”",
    "installed_skill.updated": "changed the settings of installed skill “{name}”",
    "installed_skill.stopped": "stopped the install of skill “{name}”",
    "installed_skill.uninstalled": "uninstalled skill “{name}”",
    "installed_skill.installed": "Skill “{name}” finished installing on “{config}”",
    "installed_skill.install_failed": "The install of skill “{name}” on “{config}” failed",
    # Not a member's act: the sentence stands alone (see `sentence`).
    "sandbox_config.provider_failed": "A member met a provider failure while {during} "
                                      "(reference {reference})",
    "workspace.scripts_disabled": "turned workspace scripts off",
    "workspace.scripts_enabled": "turned workspace scripts back on",
    "workspace.egress_log_disabled": "turned the egress log off",
    "egress_access.requested": "asked for {host} on sandbox config “{config}”",
    "egress_access.approved": "allowed {host} on sandbox config “{config}”",
    "egress_access.declined": "declined access to {host} on sandbox config “{config}”",
    "workspace.egress_log_enabled": "turned the egress log back on",
}


def _skill_settings(data: dict) -> str | None:
    """installed_skill.updated in words: turned on or off, which variables were set."""
    changed, name = data.get("changed") or [], data.get("name", "")
    parts = []
    if "enabled" in changed:
        parts.append(f"{'enabled' if data.get('enabled') else 'disabled'} skill “{name}”")
    if "envs" in changed:
        names = ", ".join(data.get("env_names") or []) or "none"
        parts.append(f"changed the workspace values ({names})"
                     + ("" if parts else f" of skill “{name}”"))
    return " and ".join(parts) or None


@bp.app_template_filter("describe")
def describe_event(event: AuditEvent) -> str:
    """What happened, as a short sentence; unknown actions fall back to their code."""
    if event.action == "installed_skill.updated":
        worded = _skill_settings(event.data or {})
        if worded:
            return worded
    template = _SENTENCES.get(event.action)
    if template:
        try:
            return template.format(**(event.data or {}))
        except (KeyError, IndexError):
            pass
    target = f" {event.object_type} {event.object_id}" if event.object_id else ""
    return f"{event.action}{target}"


@bp.app_template_filter("sentence")
def event_sentence(event: AuditEvent) -> str:
    """The event as a sentence with its actor: "ada@example.com added API key “ci”."."""
    what = describe_event(event)
    text = what if what[:1].isupper() else f"{event.actor_label} {what}"
    return text if text.endswith(".") else f"{text}."


@bp.app_template_filter("upper_first")
def upper_first(text: str) -> str:
    """The first letter capitalised and the rest kept (Jinja's `capitalize` lowercases
    the rest: "MB of ..." read "Mb of ...")."""
    return text[:1].upper() + text[1:]
