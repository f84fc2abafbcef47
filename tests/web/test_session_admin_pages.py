"""The End button of the inventory drawer without a browser: the htmx fragment, the form
post's redirect, and the ids an admin of another workspace cannot reach (issue 11 item 6)."""

from __future__ import annotations

from sqlalchemy import select

from app.extensions import db
from app.models import Job, SandboxSession
from app.services.sessions import ending
from app.services.sessions import lifecycle as sessions
from tests.jobs.helpers import wait_for_terminal
from tests.sweeps.routes import make_sandbox_config
from tests.web._support import post_form, text


def settle() -> None:
    for job_id in db.session.scalars(select(Job.id).where(Job.kind == ending.JOB_KIND)):
        wait_for_terminal(job_id)


def test_end_answers_the_fresh_section_for_htmx(two_tenants, login_as):
    a, _ = two_tenants
    config_id = make_sandbox_config(a.tenant)  # a closed port: nothing is reached
    ended = sessions.create_session(a.tenant, a.contributor, config_id, "first").id
    kept = sessions.create_session(a.tenant, a.viewer, config_id, "second").id
    client = login_as(a.admin, a.tenant)
    drawer = text(client.get(f"/sandboxes/{config_id}/inventory",
                             headers={"HX-Request": "true"}))
    assert f'id="config-session-{ended}"' in drawer and a.contributor.email in drawer
    response = post_form(client, f"/sandboxes/sessions/{ended}/end", htmx=True)
    assert response.status_code == 200
    body = text(response)
    assert body.lstrip().startswith('<section id="config-sessions"')
    assert f"config-session-{kept}" in body and f"config-session-{ended}" not in body
    assert "Member&#39;s session ended; its sandbox is being removed." in body
    settle()
    # The provider refused, so the removal waits for the sweeper and the drawer says so.
    assert "1 sandbox of ended sessions is still being removed" in text(
        client.get(f"/sandboxes/{config_id}/inventory", headers={"HX-Request": "true"}))


def test_a_form_post_redirects_back_to_the_inventory(two_tenants, login_as):
    a, _ = two_tenants
    config_id = make_sandbox_config(a.tenant)
    session_id = sessions.create_session(a.tenant, a.admin, config_id, "mine").id
    response = post_form(login_as(a.admin, a.tenant), f"/sandboxes/sessions/{session_id}/end")
    assert response.status_code == 302
    assert response.headers["Location"].endswith(f"/sandboxes/{config_id}/inventory")
    assert db.session.get(SandboxSession, session_id) is None
    settle()


def test_another_workspaces_admin_gets_404(two_tenants, login_as):
    a, b = two_tenants
    session_id = sessions.create_session(a.tenant, a.contributor, make_sandbox_config(a.tenant),
                                         "theirs").id
    response = post_form(login_as(b.owner, b.tenant), f"/sandboxes/sessions/{session_id}/end",
                         htmx=True)
    assert response.status_code == 404
    db.session.expire_all()
    assert db.session.get(SandboxSession, session_id) is not None
