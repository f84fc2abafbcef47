"""Issue 15 item 2: the activity feed reads as sentences, with a "View all" page filtered
by kind of action and by member, 50 to a page (keyed by id: stable under new events)."""

from __future__ import annotations

import re

from app.extensions import db
from app.services import audit


class Actor:
    def __init__(self, user):
        self.actor_id, self.actor_label = user.id, user.email


def record(world, user, action: str, data: dict, n: int = 1) -> None:
    for i in range(n):
        audit.record(world.tenant, Actor(user), action, "thing", str(i), data)
    db.session.commit()


def sentences(body: str) -> list[str]:
    return re.findall(r'<p class="activity-sentence">(.*?)</p>', body)


def test_the_dashboard_reads_as_sentences_and_links_to_all(two_tenants, login_as):
    a, _ = two_tenants
    record(a, a.admin, "api_key.created", {"name": "ci", "prefix": "abcd1234"})
    body = login_as(a.viewer, a.tenant).get("/").get_data(as_text=True)
    assert f"{a.admin.email} created API key “ci” (sl_abcd1234_…)." in sentences(body)
    assert 'href="/activity"' in body and "View all activity" in body


def test_filters_by_kind_and_member_and_pages_by_fifty(two_tenants, login_as):
    a, b = two_tenants
    record(a, a.admin, "sandbox_config.created", {"name": "box", "sandbox_type": "docker"},
           n=60)
    record(a, a.owner, "member.removed", {"email": "x@y.test", "role": "viewer"})
    record(b, b.owner, "member.removed", {"email": "other@tenant.test", "role": "viewer"})
    client = login_as(a.viewer, a.tenant)

    everything = client.get("/activity").get_data(as_text=True)
    assert len(sentences(everything)) == 50
    assert "other@tenant.test" not in everything  # another workspace's events never show

    members = client.get("/activity?kind=members").get_data(as_text=True)
    assert sentences(members) == [f"{a.owner.email} removed x@y.test (viewer)."]

    first = client.get(f"/activity?kind=configs&member={a.admin.id}").get_data(as_text=True)
    assert len(sentences(first)) == 50
    older = re.search(r'href="(/activity\?[^"]*before=\d+[^"]*)"', first).group(1)
    record(a, a.admin, "sandbox_config.created", {"name": "late", "sandbox_type": "e2b"})
    second = client.get(older.replace("&amp;", "&")).get_data(as_text=True)
    assert len(sentences(second)) == 10  # the new event did not shift the second page
    assert "rel=\"next\"" not in second and "Newest" in second

    foreign = client.get(f"/activity?member={b.owner.id}").get_data(as_text=True)
    assert len(sentences(foreign)) == 50  # a member of another workspace is no filter


def test_bad_filters_are_ignored_not_errors(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    for query in ("kind=nope", "member=abc", "before=-1", "before=99999999999999999999999"):
        assert client.get(f"/activity?{query}").status_code == 200, query


def test_activity_needs_a_signed_in_member(client):
    response = client.get("/activity")
    assert response.status_code == 302 and "/login" in response.headers["Location"]


def test_the_sidebar_links_to_activity_for_every_member(two_tenants, login_as):
    a, _ = two_tenants
    page = login_as(a.viewer, a.tenant).get("/activity").get_data(as_text=True)
    link = re.search(r'<a class="nav-item is-active" href="/activity"\s+aria-current="page">', page)
    assert link, "the Activity item is in the sidebar and marked as the current page"
    dashboard = login_as(a.viewer, a.tenant).get("/").get_data(as_text=True)
    assert re.search(r'<a class="nav-item" href="/activity"', dashboard)


def test_a_skills_settings_and_its_installs_end_read_as_what_happened():
    """Issue 27 item 10: disabling, enabling and setting a value all read "changed the
    settings", and an install's end had no entry at all."""
    from app.models import AuditEvent
    from app.web._format import describe_event, event_sentence

    def said(action, data, actor="ada@example.com"):
        event = AuditEvent(action=action, data=data, actor_label=actor, object_type="x")
        return describe_event(event), event_sentence(event)

    updated = "installed_skill.updated"
    assert said(updated, {"name": "pdf", "changed": ["enabled"], "enabled": False})[0] == \
        "disabled skill “pdf”"
    assert said(updated, {"name": "pdf", "changed": ["enabled"], "enabled": True})[0] == \
        "enabled skill “pdf”"
    assert said(updated, {"name": "pdf", "changed": ["envs"], "env_names": ["A", "B"]})[0] == \
        "changed the workspace values (A, B) of skill “pdf”"
    assert said(updated, {"name": "pdf", "changed": ["enabled", "envs"], "enabled": True,
                          "env_names": ["A"]})[0] == \
        "enabled skill “pdf” and changed the workspace values (A)"
    assert said("installed_skill.installed", {"name": "pdf", "config": "Local"},
                actor="installer")[1] == "Skill “pdf” finished installing on “Local”."
    assert said("installed_skill.install_failed", {"name": "pdf", "config": "Local"},
                actor="installer")[1] == "The install of skill “pdf” on “Local” failed."
