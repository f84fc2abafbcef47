"""Issue 15 item 6: the dashboard summarises the workspace (configs by backend with their
last check, sessions, skills and installs needing attention, activity), each item linking
to its page, in the same number of SQL statements whatever the counts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from app.extensions import db
from app.models import (
    InstalledSkill,
    InstallStatus,
    Job,
    JobStatus,
    PoolSandbox,
    PoolState,
    SandboxConfig,
    SandboxSession,
    SkillCatalogEntry,
    WarmPool,
)
from app.models.session import BindingState
from app.models.types import utcnow
from app.services import audit
from app.services.sandboxes import document
from tests.web._support import text
from tests.web.test_members_page import statements

DOCS = {
    "docker": {"sandbox_type": "docker",
               "docker": {"image": "sandlot/sandbox:base", "network_mode": "none"}},
    "e2b": {"sandbox_type": "e2b", "allow_private_endpoints": True,
            "e2b": {"api_key": "dash-key", "template_id": "base",
                    "api_url": "http://127.0.0.1:9"}},
}
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def config(tenant, backend: str, name: str) -> SandboxConfig:
    row = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant.id, name=name, description="",
                        sandbox_type=backend,
                        config=document.validate(DOCS[backend], resolve_urls=False))
    db.session.add(row)
    return row


def pooled(tenant, row: SandboxConfig) -> None:
    row.config = {**row.config, "docker": {**row.config["docker"], "warm_pool_size": 2}}
    db.session.add(WarmPool(config_id=row.id, tenant_id=tenant.id, last_session_at=utcnow(),
                            problem=""))
    for state in (PoolState.ready, PoolState.claimed):
        db.session.add(PoolSandbox(id=str(uuid.uuid4()), tenant_id=tenant.id, config_id=row.id,
                                   engine="local", fingerprint="f", state=state,
                                   sandbox_id=f"gone-{uuid.uuid4().hex}"))


def check(tenant, row: SandboxConfig, status: JobStatus, ok: bool | None, minutes: int) -> Job:
    """A check job of `row`, as the real one leaves it (`ok` None: no result yet)."""
    result = None if ok is None else {"ok": ok, "provider": row.sandbox_type, "deep": False,
                                      "checks": [], "capabilities": {}}
    job = Job(id=str(uuid.uuid4()), tenant_id=tenant.id, kind="sandbox_check",
              target_type="sandbox_config", target_id=row.id, status=status, params={},
              result=result, log="", timeout_sec=60, created_at=T0 + timedelta(minutes=minutes))
    db.session.add(job)
    return job


def session(tenant, user, row: SandboxConfig, title: str, bound: bool) -> SandboxSession:
    item = SandboxSession(id=str(uuid.uuid4()), tenant_id=tenant.id, user_id=user.id,
                          sandbox_config_id=row.id, title=title,
                          binding_state=BindingState.bound if bound else BindingState.none)
    db.session.add(item)
    return item


def install(tenant, row: SandboxConfig, name: str, status: InstallStatus) -> InstalledSkill:
    item = InstalledSkill(id=str(uuid.uuid4()), tenant_id=tenant.id, sandbox_config_id=row.id,
                          name=name, status=status, envs=[])
    db.session.add(item)
    return item


def catalog(tenant, name: str) -> None:
    db.session.add(SkillCatalogEntry(id=str(uuid.uuid4()), tenant_id=tenant.id, name=name,
                                     bundle_ref=f"ref-{name}", bundle_sha256="0" * 64))


def workspace(group, scale: int, tag: str = "") -> dict:
    """`scale` Docker configs per check outcome (and one E2B set), with sessions, installs
    and catalog skills. The E2B configs carry nothing a test teardown must reach."""
    tenant, made = group.tenant, {}
    for n in range(scale):
        for backend in ("docker", "e2b") if n == 0 else ("docker",):
            passed = config(tenant, backend, f"{backend} passed {tag}{n}")
            problems = config(tenant, backend, f"{backend} problems {tag}{n}")
            checking = config(tenant, backend, f"{backend} checking {tag}{n}")
            never = config(tenant, backend, f"{backend} never {tag}{n}")
            db.session.flush()
            if backend == "docker":  # with a warm pool: one ready, one taken
                pooled(tenant, never)
            check(tenant, passed, JobStatus.failed, None, 1)  # older: only the newest counts
            made.setdefault("passed", check(tenant, passed, JobStatus.succeeded, True, 2 + n))
            made.setdefault("problems", check(tenant, problems, JobStatus.succeeded, False,
                                              3 + n))
            check(tenant, checking, JobStatus.running, None, 4 + n)
            if backend == "docker":
                docker = (passed, problems, checking)
        passed, problems, checking = docker
        made.setdefault("mine", session(tenant, group.admin, passed, f"admin session {tag}{n}",
                                        True))
        made.setdefault("theirs", session(tenant, group.viewer, passed,
                                          f"viewer session {tag}{n}", False))
        made.setdefault("failed", install(tenant, passed, f"broken-{tag}{n}",
                                          InstallStatus.failed))
        install(tenant, problems, f"busy-{tag}{n}", InstallStatus.installing)
        install(tenant, checking, f"fine-{tag}{n}", InstallStatus.ready)
        catalog(tenant, f"skill-{tag}{n}")
        audit.record(tenant, audit.SystemActor("tests"), "sandbox_config.created",
                     "sandbox_config", passed.id, {"name": passed.name, "sandbox_type": "docker"})
    db.session.commit()
    return made


def test_configs_are_counted_by_backend_and_last_check(two_tenants, login_as):
    a, b = two_tenants
    workspace(a, 2)
    workspace(b, 3)  # another workspace's rows count nowhere
    page = text(login_as(a.admin, a.tenant).get("/"))
    assert 'href="/sandboxes?backend=docker">Docker</a>' in page
    assert 'href="/sandboxes?backend=e2b">E2B</a>' in page and "?backend=cube" not in page
    docker = page.split('backend=docker">Docker</a>', 1)[1].split("</li>", 1)[0]
    for phrase in ("8 configs", "2 passed", "2 with problems", "2 checking now",
                   "2 never checked"):
        assert phrase in docker, phrase
    assert "did not finish" not in docker  # an older failed check does not count
    e2b = page.split('backend=e2b">E2B</a>', 1)[1].split("</li>", 1)[0]
    assert "4 configs" in e2b and "1 passed" in e2b
    assert '<p class="stat-value">12</p>' in page


def test_every_item_links_to_its_page_for_an_admin(two_tenants, login_as):
    a, _ = two_tenants
    made = workspace(a, 1)
    page = text(login_as(a.admin, a.tenant).get("/"))
    problems = made["problems"]
    assert f'href="/sandboxes/checks/{problems.id}">Check found problems</a>' in page
    assert f'href="/sandboxes/{problems.target_id}/edit">' in page
    assert f'href="/playground/{made["mine"].id}">admin session 0</a>' in page
    theirs = made["theirs"]
    assert f'href="/sandboxes/{theirs.sandbox_config_id}/inventory">viewer session 0</a>' in page
    assert a.viewer.email in page and "Sandbox running" in page
    assert f'href="/skills/installs/{made["failed"].id}">broken-0</a>' in page
    assert "Install failed" in page and "busy-0" in page and "Installing" in page
    assert "fine-0" not in page  # a ready install needs no attention
    assert '<a href="/sandboxes">tests added sandbox config “docker passed 0” (docker).</a>' in page


def test_a_viewer_sees_only_their_sessions_and_pages_they_may_open(two_tenants, login_as):
    a, _ = two_tenants
    made = workspace(a, 1)
    page = text(login_as(a.viewer, a.tenant).get("/"))
    assert f'href="/playground/{made["theirs"].id}">viewer session 0</a>' in page
    assert "admin session 0" not in page and a.admin.email not in page
    for admin_only in ("/edit", "/inventory", "/sandboxes/checks/", "/skills/installs/",
                       'href="/members"', 'href="/api-keys"'):
        assert admin_only not in page, admin_only
    assert 'href="/sandboxes?backend=docker">docker problems 0</a>' in page
    assert 'href="/skills">broken-0</a>' in page


def test_an_empty_workspace_says_so(two_tenants, login_as):
    a, _ = two_tenants
    page = text(login_as(a.viewer, a.tenant).get("/"))
    assert "No sandbox configs yet" in page and "No open sessions" in page
    assert "Nothing needs attention" in page


def test_the_dashboard_costs_the_same_statements_at_any_size(two_tenants, login_as):
    a, _ = two_tenants
    for user in (a.admin, a.viewer):
        client = login_as(user, a.tenant)
        client.get("/")
        workspace(a, 1, f"{user.id}-small-")
        with statements() as small:
            assert client.get("/").status_code == 200
        workspace(a, 12, f"{user.id}-large-")
        with statements() as large:
            assert client.get("/").status_code == 200
        assert len(large) == len(small), "\n".join(large)
        assert len(large) <= 15  # 14, and the warm pools panel's one


def test_a_members_session_title_is_shown_as_text_to_an_admin(two_tenants, login_as):
    a, _ = two_tenants
    row = config(a.tenant, "docker", "plain")
    db.session.flush()
    session(a.tenant, a.viewer, row, "<img src=x onerror=alert(1)>", False)
    db.session.commit()
    body = text(login_as(a.admin, a.tenant).get("/"))
    assert "<img src=x" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body


def test_the_workspace_sees_its_use_against_each_quota(app, two_tenants, login_as,
                                                      monkeypatch):
    """Issue 22 item 3: each quota with its limit (the operator's override where set)."""
    a, _ = two_tenants
    monkeypatch.setitem(app.config, "QUOTA_SANDBOX_CONFIGS_PER_WORKSPACE", 7)
    config(a.tenant, "docker", "one")
    a.tenant.quotas = {"live_sandboxes_per_workspace": 3}
    db.session.commit()
    page = text(login_as(a.viewer, a.tenant).get("/"))
    assert '<h2 id="quotas-title">Quotas</h2>' in page
    assert 'aria-label="Sandbox configs per workspace: 1 of 7"' in page
    assert 'aria-label="Live sandboxes per workspace: 0 of 3"' in page
    assert 'aria-label="Live sandboxes per member: 0 of 5"' in page
    # each with its default, and the deployment's own limits (issue 22: the settings page
    # lists every quota with its default)
    assert "set for this workspace; the default is 25" in page
    assert page.count("the deployment's default") == 5  # and warm pool sandboxes
    monkeypatch.setitem(app.config, "SKILL_INSTALL_DISK_MB", 4096)
    page = text(login_as(a.viewer, a.tenant).get("/"))
    assert "<dt>MB of disk an install&#39;s commands get</dt><dd>4096</dd>" in page
