"""The Playground: open a session on a config, run commands in its one persistent sandbox,
see each run appended to the transcript, end the session. Docker runs are real."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from app.backends.base import SandboxNotFound
from app.backends.docker.backend import DockerBackend
from app.extensions import db
from app.models import Job, Role, SandboxConfig, SandboxRemoval, SandboxSession
from app.models.types import utcnow
from app.services import audit
from app.services.sandboxes import configs as service
from app.services.sessions import ending
from app.services.sessions import lifecycle as sessions
from tests.backends.conftest import BASE_IMAGE, DOCKER_HOST, require_docker
from tests.jobs.helpers import wait_for_terminal
from tests.web._support import htmx_headers, post_form, text

# Configs here point at loopback fakes: the operator allows private endpoints.
pytestmark = pytest.mark.usefixtures("private_endpoints")

DOCKER_DOC = {"sandbox_type": "docker",
              "docker": {"image": BASE_IMAGE, "network_mode": "none"}}
PRINT_ONE = "python3 -c 'print(1)'"


def make_config(group, name: str = "Local Docker", doc: dict | None = None) -> SandboxConfig:
    return service.create_config(group.tenant, audit.SystemActor("tests"), name, "",
                                 doc or DOCKER_DOC)


def open_session(client, config: SandboxConfig, title: str = "Try it") -> str:
    response = post_form(client, "/playground", {"config_id": config.id, "title": title},
                         htmx=True, token_from="/playground")
    assert response.status_code == 200, text(response)
    match = re.fullmatch(r"/playground/([0-9a-f-]{36})", response.headers["HX-Push-Url"])
    assert match, response.headers
    return match.group(1)


def run(client, session_id: str, command: str, timeout: str = ""):
    path = f"/playground/{session_id}"
    headers = {**htmx_headers(client, path), "HX-Current-URL": f"http://localhost{path}"}
    return client.post(f"{path}/exec", data={"command": command, "timeout_sec": timeout},
                       headers=headers)


def sandbox_of(fragment: str) -> str:
    match = re.search(r'class="run-sandbox[^"]*">[^<]*<code title="([^"]+)"', fragment)
    assert match, fragment
    return match.group(1)


def entry(fragment: str) -> str:
    """The appended transcript entry, without the out-of-band header and list row."""
    return fragment.split("<div id=\"session-binding\"", 1)[0]


# -- navigation and the empty states ---------------------------------------------------------

@pytest.mark.parametrize("role", list(Role))
def test_the_nav_links_to_the_playground_for_every_role(two_tenants, login_as, role):
    a, _ = two_tenants
    page = text(login_as(a.by_role[role], a.tenant).get("/playground"))
    assert 'href="/playground"' in page and "<span>Playground</span>" in page
    assert re.search(r'href="/playground"\s+aria-current="page">', page)
    assert "No sessions yet" in page and "No session selected" in page


def test_without_configs_the_open_form_says_where_configs_come_from(two_tenants, login_as):
    a, _ = two_tenants
    viewer = text(login_as(a.viewer, a.tenant).get("/playground"))
    assert "No sandbox configs in Tenant A yet." in viewer
    assert "An admin can add one under Sandboxes." in viewer
    assert 'name="config_id"' not in viewer
    admin = text(login_as(a.admin, a.tenant).get("/playground"))
    assert '<a href="/sandboxes">Add one under Sandboxes</a>' in admin


def test_the_open_form_lists_the_workspace_configs_and_no_secret(two_tenants, login_as):
    a, b = two_tenants
    make_config(a)
    make_config(a, "E2B production", {
        "sandbox_type": "e2b", "allow_private_endpoints": True,
        "e2b": {"api_key": "e2b-canary-4f1d", "api_url": "http://127.0.0.1:9",
                "template_id": "base"}})
    make_config(b, "Other workspace")
    page = text(login_as(a.viewer, a.tenant).get("/playground"))
    assert re.search(r"<option[^>]*>E2B production · E2B</option>", page)
    assert re.search(r"<option[^>]*>Local Docker · Docker</option>", page)
    assert "Other workspace" not in page and "e2b-canary-4f1d" not in page


# -- opening a session -----------------------------------------------------------------------

def test_opening_a_session_shows_it_selected_with_no_sandbox_yet(two_tenants, login_as):
    a, _ = two_tenants
    config = make_config(a)
    client = login_as(a.contributor, a.tenant)
    response = post_form(client, "/playground", {"config_id": config.id, "title": "Pandas"},
                         htmx=True, token_from="/playground")
    body = text(response)
    assert response.status_code == 200 and body.lstrip().startswith('<div id="playground"')
    assert "Session opened. Its sandbox starts with the first command." in body
    (session,) = sessions.list_sessions(a.tenant, a.contributor)
    assert response.headers["HX-Push-Url"] == f"/playground/{session.id}"
    assert session.title == "Pandas" and session.sandbox_config_id == config.id
    assert f'id="session-{session.id}" class="session-row is-selected"' in body
    assert "No sandbox yet" in body and 'id="transcript"' in body
    # Runs append to the transcript, keep it scrolled to the end, and disable Run meanwhile.
    assert 'hx-target="#transcript" hx-swap="beforeend scroll:#transcript:bottom"' in body
    assert 'hx-disabled-elt="find button[type=submit]"' in body
    assert "latest 20 commands" in body


def test_opening_without_javascript_redirects_to_the_session(two_tenants, login_as):
    a, _ = two_tenants
    config = make_config(a)
    client = login_as(a.viewer, a.tenant)
    response = post_form(client, "/playground", {"config_id": config.id},
                         token_from="/playground")
    (session,) = sessions.list_sessions(a.tenant, a.viewer)
    assert response.status_code == 302
    assert response.headers["Location"].endswith(f"/playground/{session.id}")
    page = text(client.get(f"/playground/{session.id}"))
    assert f"Session {session.id[:8]}" in page  # an untitled session is named by its id
    assert "Session opened." in page


def test_the_open_form_refuses_bad_input_in_place(two_tenants, login_as):
    a, b = two_tenants
    config = make_config(a)
    foreign = make_config(b, "Theirs")
    client = login_as(a.viewer, a.tenant)
    for data, message in (({"config_id": ""}, "Choose a sandbox config."),
                          ({"config_id": foreign.id}, "Not a valid choice"),
                          ({"config_id": config.id, "title": "a\0b"}, "Remove the NUL"),
                          ({"config_id": config.id, "title": "x" * 201}, "200 characters")):
        response = post_form(client, "/playground", data, htmx=True, token_from="/playground")
        body = text(response)
        assert response.status_code == 400, data
        assert response.headers["HX-Retarget"] == "#open-session"
        assert body.lstrip().startswith('<section id="open-session"') and message in body
    assert sessions.list_sessions(a.tenant, a.viewer) == []
    page = post_form(client, "/playground", {"config_id": ""}, token_from="/playground")
    assert page.status_code == 400 and "Choose a sandbox config." in text(page)


# -- running commands (real Docker) ----------------------------------------------------------

def test_running_twice_reuses_the_same_sandbox(two_tenants, login_as):
    require_docker()
    a, _ = two_tenants
    client = login_as(a.contributor, a.tenant)
    session_id = open_session(client, make_config(a))

    first, second = run(client, session_id, PRINT_ONE), run(client, session_id, PRINT_ONE)
    assert first.status_code == second.status_code == 200
    one, two = text(first), text(second)
    for body in (one, two):
        assert '<pre class="run-cmd">\npython3 -c &#39;print(1)&#39;</pre>' in body
        assert '<pre class="run-out">\n1</pre>' in body
        assert '<span class="exit exit-ok">exit 0</span>' in body and "<html" not in body
    assert "New sandbox" in entry(one) and "Same sandbox" not in entry(one)
    assert "Same sandbox" in entry(two) and "New sandbox" not in entry(two)
    sandbox_id = sandbox_of(one)
    assert sandbox_of(two) == sandbox_id

    # The header and the list row are refreshed out of band with the binding.
    assert f'<code title="{sandbox_id}">{sandbox_id[:12]}</code>' in two
    assert re.search(r'<div id="session-binding" hx-swap-oob="true"', two)
    assert re.search(r"<dt>Last run</dt>\s*<dd>Reused</dd>", two)
    assert re.search(r"<dt>Runs</dt>\s*<dd>2</dd>", two)
    assert re.search(r"<dt>Network</dt>\s*<dd[^>]*>No internet access</dd>", two)
    assert f'<li id="session-{session_id}" class="session-row is-selected" hx-swap-oob="true">' \
        in two and "2 runs" in two

    page = text(client.get(f"/playground/{session_id}"))  # a reload: the stored runs
    assert re.search(r"<dt>Runs</dt>\s*<dd>2</dd>", page)
    assert re.search(r"<dt>Last run</dt>\s*<dd>Reused</dd>", page)  # read from the runs
    assert page.count('class="run run-stored"') == 2 and page.count("exit 0") == 2
    assert f"Sandbox <code>{sandbox_id[:12]}</code>" in page


def test_a_sandbox_gone_from_its_engine_is_said_and_started_again_on_request(
        two_tenants, login_as):
    """Decisions 17: the run says the sandbox is gone, the header offers a new one, and
    nothing is created until the member asks; the Files and Terminal pages say so too."""
    require_docker()
    a, _ = two_tenants
    client = login_as(a.contributor, a.tenant)
    session_id = open_session(client, make_config(a))
    old = sandbox_of(text(run(client, session_id, "true")))
    DockerBackend({"host": DOCKER_HOST}).delete(old)

    refused = run(client, session_id, "echo hi")
    assert refused.status_code == 409
    body = text(refused)
    assert "sandbox is gone" in entry(body) and "Start a new sandbox" in entry(body)
    assert '<span class="status status-gone">Gone</span>' in body
    assert f'action="/playground/{session_id}/start"' in body and 'value="playground"' in body
    assert "Sandbox gone" in body  # the session's row in the list
    assert db.session.get(SandboxSession, session_id).sandbox_id is None
    files = client.get(f"/playground/{session_id}/files")
    assert files.status_code == 200 and "Sandbox gone" in text(files)
    assert "Start a new sandbox" in text(client.get(f"/playground/{session_id}/terminal"))

    started = post_form(client, f"/playground/{session_id}/start", {"next": "playground"},
                        token_from=f"/playground/{session_id}")
    assert started.status_code == 303
    assert started.headers["Location"].endswith(f"/playground/{session_id}")
    new = db.session.get(SandboxSession, session_id)
    db.session.refresh(new)
    assert new.binding_state.value == "bound" and new.sandbox_id not in (None, old)
    again = text(run(client, session_id, "echo hi"))
    assert '<pre class="run-out">\nhi</pre>' in again and "Same sandbox" in entry(again)


def test_a_viewer_can_run_commands_and_output_is_escaped(two_tenants, login_as):
    require_docker()
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    response = run(client, session_id, "echo '<b>out</b>'; echo '<i>err</i>' >&2; exit 3")
    body = entry(text(response))
    assert response.status_code == 200
    assert '<pre class="run-out">\n&lt;b&gt;out&lt;/b&gt;</pre>' in body
    assert '<pre class="run-out run-stderr" aria-label="stderr">\n&lt;i&gt;err&lt;/i&gt;</pre>' \
        in body
    assert '<span class="exit exit-bad">exit 3</span>' in body
    assert 'class="run run-failed"' in body and "<b>" not in body


def test_a_timeout_is_noted_on_the_entry(two_tenants, login_as):
    require_docker()
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    body = entry(text(run(client, session_id, "sleep 20", timeout="1")))
    assert '<span class="run-note">Timed out</span>' in body and "exit-bad" in body


def test_a_run_that_wrote_into_workspace_output_links_to_those_files(two_tenants, login_as):
    require_docker()
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    body = entry(text(run(client, session_id, "echo r > /workspace/output/report.txt")))
    link = f'href="/playground/{session_id}/files?path=/workspace/output"'
    assert link in body and "1 new file in <code>/workspace/output</code>" in body
    assert link not in entry(text(run(client, session_id, "echo nothing new")))
    page = text(client.get(f"/playground/{session_id}"))  # the stored run says it too
    assert page.count(link) == 1


def test_ending_a_session_destroys_its_sandbox(two_tenants, login_as):
    require_docker()
    a, _ = two_tenants
    client = login_as(a.contributor, a.tenant)
    session_id = open_session(client, make_config(a))
    sandbox_id = sandbox_of(text(run(client, session_id, "true")))
    engine = DockerBackend({"image": BASE_IMAGE, "host": DOCKER_HOST, "http_timeout_sec": 30})
    try:
        assert engine.get(sandbox_id).id.startswith(sandbox_id[:12])
        path = f"/playground/{session_id}"
        page = text(client.get(path))
        assert 'hx-confirm="End “Try it”? Its sandbox is destroyed' in page
        headers = {**htmx_headers(client, path), "HX-Current-URL": f"http://localhost{path}"}
        response = client.post(f"{path}/end", headers=headers)
        body = text(response)
        assert response.status_code == 200
        assert body.lstrip().startswith('<section id="session-list"')
        assert "Session ended; its sandbox is being removed." in body and "No sessions yet" in body
        assert '<section id="session-pane" class="session-pane" aria-label="Session" ' \
               'hx-swap-oob="true">' in body and "No session selected" in body
        assert response.headers["HX-Replace-Url"] == "/playground"
        job_id = db.session.scalar(select(Job.id).where(Job.kind == ending.JOB_KIND))
        assert wait_for_terminal(job_id).result == {"outcome": "removed"}
        with pytest.raises(SandboxNotFound):
            engine.get(sandbox_id)
    finally:
        engine.close()
    assert sessions.list_sessions(a.tenant, a.contributor) == []
    assert client.get(path).status_code == 404


# -- errors are transcript entries ------------------------------------------------------------

def test_the_kill_switch_appends_an_error_entry(two_tenants, login_as):
    a, _ = two_tenants
    config = make_config(a)
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, config)
    service.set_scripts_disabled(a.tenant, audit.SystemActor("tests"), True)
    response = run(client, session_id, PRINT_ONE)
    body = entry(text(response))
    assert response.status_code == 403 and "HX-Retarget" not in response.headers
    assert body.lstrip().startswith('<article class="run run-error">')
    assert "Script execution is turned off for this workspace." in body
    assert "An admin can turn scripts back on under Sandboxes." in body
    assert "workspace_scripts_disabled" in body
    db.session.expire_all()
    assert db.session.get(SandboxSession, session_id).exec_count == 0


def test_a_cordoned_config_appends_an_error_entry(two_tenants, login_as):
    a, _ = two_tenants
    config = make_config(a)
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, config)
    config.cordoned_at = utcnow()
    db.session.commit()
    response = run(client, session_id, PRINT_ONE)
    assert response.status_code == 423
    assert "Another change to this config is in progress" in entry(text(response))
    assert "sandbox_config_cordoned" in text(response)


def test_a_quota_reached_appends_its_sentence(app, two_tenants, login_as, monkeypatch):
    monkeypatch.setitem(app.config, "QUOTA_LIVE_SANDBOXES_PER_MEMBER", 0)
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    response = run(client, session_id, PRINT_ONE)
    body = entry(text(response))
    assert response.status_code == 429 and 'class="run run-error"' in body
    assert ("This is past the quota of 0 live sandboxes per member (0 in use). End one of "
            "your sessions to free one.") in body
    assert "No sandbox yet" in text(response)  # the claim was given back


def test_a_provider_that_is_down_appends_its_reason(two_tenants, login_as):
    a, _ = two_tenants
    config = make_config(a, "Old engine", {"sandbox_type": "docker", "docker": {
        "image": BASE_IMAGE, "engine": "missing"}})
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, config)
    response = run(client, session_id, PRINT_ONE)
    body = entry(text(response))
    assert response.status_code == 503 and 'class="run run-error"' in body
    assert "The sandbox service could not be reached." in body and "reference" in body
    assert "unavailable · 503" in body
    assert "No sandbox yet" in text(response)  # the row, refreshed: the claim was given back


def test_bad_input_appends_a_validation_entry(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    for command, timeout, message in (("  ", "", "Command: must not be empty"),
                                      ("true", "soon", "Timeout: enter a whole number"),
                                      ("true", "0", "Timeout: between 1 and 600"),
                                      ("a\0b", "", "Command: at most")):
        response = run(client, session_id, command, timeout)
        assert response.status_code == 400, command
        assert message in entry(text(response)), text(response)


def test_without_javascript_a_run_renders_the_page_with_its_entry(two_tenants, login_as):
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    service.set_scripts_disabled(a.tenant, audit.SystemActor("tests"), True)
    path = f"/playground/{session_id}"
    response = post_form(client, f"{path}/exec", {"command": "echo kept", "timeout_sec": "5"},
                         token_from=path)
    page = text(response)
    assert response.status_code == 403 and "<html" in page
    assert "Script execution is turned off" in page
    assert ">echo kept</textarea>" in page and 'value="5"' in page


# -- sessions are their owner's ----------------------------------------------------------------

def test_another_members_session_is_not_found(two_tenants, login_as):
    a, b = two_tenants
    config = make_config(a)
    theirs = sessions.create_session(a.tenant, a.contributor, config.id, "Private")
    foreign = sessions.create_session(b.tenant, b.owner, make_config(b).id, "Elsewhere")
    client = login_as(a.owner, a.tenant)
    assert "Private" not in text(client.get("/playground"))
    for session_id in (theirs.id, foreign.id):
        path = f"/playground/{session_id}"
        assert client.get(path).status_code == 404
        assert post_form(client, f"{path}/exec", {"command": "true"}).status_code == 404
        assert post_form(client, f"{path}/end").status_code == 404
    db.session.expire_all()
    assert db.session.get(SandboxSession, theirs.id) is not None
    assert db.session.get(SandboxSession, foreign.id) is not None


def test_ending_a_session_whose_provider_is_down_still_closes_it(two_tenants, login_as):
    """Issue 11 item 6: the record closes at once; the removal waits for the sweeper."""
    a, _ = two_tenants
    config = make_config(a, "Old engine", {"sandbox_type": "docker", "docker": {
        "image": BASE_IMAGE, "engine": "missing"}})
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, config)
    path = f"/playground/{session_id}"
    headers = {**htmx_headers(client, path), "HX-Current-URL": f"http://localhost{path}"}
    response = client.post(f"{path}/end", headers=headers)
    body = text(response)
    assert response.status_code == 200 and response.headers["HX-Replace-Url"] == "/playground"
    assert f'id="session-{session_id}"' not in body
    assert "Session ended; its sandbox is being removed." in body
    assert sessions.list_sessions(a.tenant, a.viewer) == []
    job_id = db.session.scalar(select(Job.id).where(Job.kind == ending.JOB_KIND))
    assert wait_for_terminal(job_id).result == {"outcome": "retry"}
    assert db.session.scalar(select(SandboxRemoval.session_id)) == session_id


def test_a_session_on_a_deleted_config_says_so(two_tenants, login_as):
    a, _ = two_tenants
    config = make_config(a)
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, config)
    config.deleted_at = utcnow()
    db.session.commit()
    page = text(client.get(f"/playground/{session_id}"))
    assert "Deleted config" in page and "badge-None" not in page
    response = run(client, session_id, PRINT_ONE)
    assert response.status_code == 404
    assert "No such sandbox config in this workspace." in entry(text(response))


def test_a_run_lists_what_the_egress_policy_refused_during_it(two_tenants, login_as):
    """Issue 24 item 3: a command that failed because the gateway refused a host says so
    under the run, instead of leaving the member to guess at a timeout."""
    import uuid

    from app.models import ExecRun, RunStatus

    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    stored = ExecRun(id=str(uuid.uuid4()), tenant_id=a.tenant.id, session_id=session_id,
                     user_id=a.viewer.id, command="pip install requests",
                     status=RunStatus.failed, exit_code=1, duration_ms=900,
                     finished_at=utcnow(),
                     egress_denied=[{"host": "pypi.org", "port": 443, "count": 3},
                                    {"host": "files.example", "port": 80, "count": 1}])
    db.session.add(stored)
    db.session.commit()

    fragment = text(client.get(f"/playground/{session_id}/runs/{stored.id}",
                               headers=htmx_headers(client, f"/playground/{session_id}")))

    assert "egress policy refused connections during this command" in fragment
    assert "<code>pypi.org:443</code> <span class=\"muted\">×3</span>" in fragment
    assert "<code>files.example:80</code></li>" in fragment
    assert "A workspace admin can allow a host" in fragment and 'href="/egress' not in fragment
    admin = login_as(a.admin, a.tenant)
    admin_session = open_session(admin, make_config(a, "Admin box"))
    stored.session_id, stored.user_id = admin_session, a.admin.id
    db.session.commit()
    seen = text(admin.get(f"/playground/{admin_session}/runs/{stored.id}",
                          headers=htmx_headers(admin, f"/playground/{admin_session}")))
    assert 'href="/egress?verdict=denied"' in seen and "See it in the egress log" in seen


def test_a_runs_end_tells_the_page_and_the_header_loads_again(two_tenants, login_as):
    """Issue 27 item 6: the poll that brings a run's end triggers `run-ended`, which loads
    the header's facts and the session's row again; a running one does not; a skill run
    is labelled with its skill. No sandbox is needed: the runs are stored rows."""
    import uuid

    from app.models import ExecRun, RunStatus

    a, b = two_tenants
    client = login_as(a.viewer, a.tenant)
    session_id = open_session(client, make_config(a))
    path = f"/playground/{session_id}"

    def stored(status: RunStatus, skill: str | None = None) -> str:
        row = ExecRun(id=str(uuid.uuid4()), tenant_id=a.tenant.id, session_id=session_id,
                      user_id=a.viewer.id, command="make", skill=skill, status=status,
                      exit_code=None if status == RunStatus.running else 0,
                      finished_at=None if status == RunStatus.running else utcnow())
        db.session.add(row)
        db.session.commit()
        return row.id

    headers = htmx_headers(client, path)
    running = client.get(f"{path}/runs/{stored(RunStatus.running)}", headers=headers)
    assert "HX-Trigger" not in running.headers
    ended = client.get(f"{path}/runs/{stored(RunStatus.succeeded, 'greeter')}", headers=headers)
    assert ended.headers["HX-Trigger"] == "run-ended"
    assert re.search(r"Skill <strong>greeter</strong> · runs in the skill's folder", text(ended))

    page = text(client.get(path))
    assert re.search(rf'hx-get="{path}/binding" hx-trigger="run-ended from:body"', page)
    header = text(client.get(f"{path}/binding", headers=headers))
    assert '<div id="session-binding"' in header
    assert f'<li id="session-{session_id}" class="session-row is-selected" hx-swap-oob="true">' \
        in header
    other = login_as(b.owner, b.tenant)
    assert other.get(f"{path}/binding").status_code == 404


def test_the_command_form_placeholders_read_as_examples(two_tenants, login_as):
    """Issue 27 item 10: no placeholder looks like a value already typed; the timeout's
    default is help text next to the empty field."""
    a, _ = two_tenants
    client = login_as(a.viewer, a.tenant)
    page = text(client.get(f"/playground/{open_session(client, make_config(a))}"))
    assert "placeholder=\"e.g. python3 -c 'print(1)'\"" in page
    timeout = re.search(r'<input id="timeout_sec"[^>]*>', page).group(0)
    assert "placeholder" not in timeout and 'aria-describedby="timeout-help"' in timeout
    assert '<span class="muted" id="timeout-help">s · default 60</span>' in page
