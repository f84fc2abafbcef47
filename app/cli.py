"""Bootstrap and operations commands: `flask tenants|users|api-keys|demo|secrets|jobs|openapi|
quotas` and `flask worker`."""

from __future__ import annotations

import json

import click
from flask import Flask, current_app
from flask.cli import AppGroup

from app.auth.pepper import api_key_pepper
from app.errors import AppError
from app.extensions import db
from app.models import Role
from app.services import audit, key_rotation, quotas
from app.services.demo import seed_demo
from app.services.identity import api_keys, member_exit, users

tenants_cli = AppGroup("tenants", help="Manage workspaces.")
users_cli = AppGroup("users", help="Manage users.")
keys_cli = AppGroup("api-keys", help="Manage API keys.")
demo_cli = AppGroup("demo", help="Demo data.")
secrets_cli = AppGroup("secrets", help="Encryption keys for stored secrets.")
jobs_cli = AppGroup("jobs", help="Background jobs.")
openapi_cli = AppGroup("openapi", help="The API's OpenAPI document.")
quotas_cli = AppGroup("quotas", help="Workspace quotas: see them, set one workspace's own.")


def register(app: Flask) -> None:
    for group in (tenants_cli, users_cli, keys_cli, demo_cli, secrets_cli, jobs_cli, openapi_cli,
                  quotas_cli):
        app.cli.add_command(group)
    app.cli.add_command(worker)
    app.cli.add_command(node)


def _fail(err: AppError) -> None:
    db.session.rollback()
    raise click.ClickException(err.message + _details(err))


def _details(err: AppError) -> str:
    errors = (err.data or {}).get("errors") if isinstance(err.data, dict) else None
    return "".join(f"\n  {e['field']}: {e['message']}" for e in errors or [])


@tenants_cli.command("create")
@click.argument("name")
def create_tenant(name: str) -> None:
    try:
        tenant = users.create_tenant(name)
        db.session.commit()
    except AppError as err:
        _fail(err)
    click.echo(f"created workspace {tenant.name} (id {tenant.id})")


@users_cli.command("create")
@click.argument("email")
@click.option("--password", required=True, help="Initial password (at least 8 characters).")
@click.option("--tenant", "tenant_name", help="Workspace to add the user to.")
@click.option("--role", type=click.Choice([r.value for r in Role]), default="viewer")
def create_user(email: str, password: str, tenant_name: str | None, role: str) -> None:
    try:
        tenant = _tenant(tenant_name) if tenant_name else None
        user = users.find_user(email) or users.create_user(email, password)
        if tenant is not None:
            users.grant(tenant, user, Role(role))
            audit.record(tenant, audit.SystemActor("cli"), "member.added", "user", user.id,
                         {"email": user.email, "role": role})
        db.session.commit()
    except AppError as err:
        _fail(err)
    where = f" in {tenant.name} as {role}" if tenant is not None else ""
    click.echo(f"user {user.email} (id {user.id}){where}")


@users_cli.command("delete")
@click.argument("email")
def delete_user(email: str) -> None:
    """Delete a user everywhere: memberships, keys, personal values; sessions closed."""
    user = users.find_user(email)
    if user is None:
        raise click.ClickException(f"no user with email {users.normalise_email(email)}")
    user_id, tenants = user.id, len(user.memberships)
    closed = member_exit.delete_user(user, audit.SystemActor("cli"))
    click.echo(f"deleted user {user_id} from {tenants} workspace(s); {closed} session(s) "
               "closed, their sandboxes queued for removal")


@keys_cli.command("create")
@click.option("--tenant", "tenant_name", required=True)
@click.option("--name", required=True)
@click.option("--full-access", is_flag=True, default=False)
@click.option("--capability", "capabilities", multiple=True)
def create_key(tenant_name: str, name: str, full_access: bool, capabilities: tuple[str]) -> None:
    """Create a key and print it once; only its digest is stored."""
    try:
        tenant = _tenant(tenant_name)
        key, plaintext = api_keys.create_key(
            tenant, audit.SystemActor("cli"), name=name, full_access=full_access,
            capabilities=list(capabilities), expires_at=None,
            pepper=api_key_pepper(),
        )
    except AppError as err:
        _fail(err)
    click.echo(f"created API key {key.name} (prefix {key.prefix}); it is shown only now:",
               err=True)
    click.echo(plaintext)


@demo_cli.command("seed")
def demo_seed() -> None:
    """Create (or refresh) the demo workspace and print its sign-in credentials."""
    result = seed_demo()
    click.echo("Demo workspace ready:")
    click.echo(f"  workspace: {result.tenant_name}")
    for account in result.accounts:
        click.echo(f"  {account.role:<11} {account.email}  password: {account.password}")
    click.echo(f"  sandbox config: {result.sandbox_config} (Docker, sandlot/sandbox:base)")
    click.echo("  sign in at http://127.0.0.1:5000/login")


@secrets_cli.command("rotate")
def rotate() -> None:
    """Re-encrypt every stored secret under the newest SECRETS_KEYS entry."""
    report = key_rotation.rotate_all()
    for line in report.lines():
        click.echo(line)


@jobs_cli.command("reap")
def reap_jobs() -> None:
    from app.jobs.queue import reaper_grace
    from app.services import jobs
    from app.services.sandboxes import egress_daemons, host_sweep, image
    from app.services.sessions import runs
    from app.services.skills.installs import control

    click.echo(f"reaped {jobs.reap(reaper_grace(current_app))} silent jobs")
    click.echo(f"ended {control.reap()} skill installs whose run died")
    click.echo(f"marked {runs.reap_lost()} command runs lost whose process stopped")
    click.echo(f"ended the commands of {runs.end_lost()} lost runs")
    click.echo(f"released {image.sweep_expired()} skill snapshots past their retention")
    click.echo(f"released {len(host_sweep.sweep(force=True))} leftovers of gone sandboxes "
               "on this host")
    started = egress_daemons.supervise()
    click.echo(f"started the sandbox egress {' and '.join(started)} again" if started
               else "the sandbox egress daemons need nothing")


@openapi_cli.command("dump")
@click.argument("path", type=click.Path(dir_okay=False, writable=True))
def dump_openapi(path: str) -> None:
    """Write the document /api/v1/openapi.json serves to PATH (e.g. docs/openapi.json)."""
    # Asked of the app itself, so the CLI does not import the API layer.
    response = current_app.test_client().get("/api/v1/openapi.json")
    if response.status_code != 200:
        raise click.ClickException(f"/api/v1/openapi.json answered {response.status_code}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(response.get_json(), indent=2, sort_keys=True) + "\n")
    click.echo(f"wrote {path}")


@click.command("worker")
@click.option("--burst", is_flag=True, help="Exit when the queue is empty (for tests).")
def worker(burst: bool) -> None:
    """Run an RQ worker for REDIS_URL inside this app's context."""
    from app.jobs.worker import run_worker

    run_worker(current_app._get_current_object(), burst=burst)


@click.command("node")
def node() -> None:
    """Serve the Docker engines this host owns (SANDBOX_OWN_ENGINES) to the deployment's
    other hosts, through Redis, until stopped; no web, no jobs."""
    import signal
    import threading

    from app.services.sandboxes import node_host, pools

    app = current_app._get_current_object()
    try:
        serving = node_host.make_node(app)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: serving.stopping.set())
    threading.Thread(target=node_host.housekeeping, args=(app, serving.stopping),
                     name="sandlot-node-housekeeping", daemon=True).start()
    pools.start_keeper(app, serving.stopping)  # the warm pools of the engines it owns
    click.echo(f"node {serving.id} serving Docker engines "
               f"{', '.join(serving.engines)} (up to {serving.max_calls} calls at once)")
    serving.run()
    click.echo(f"node {serving.id} stopped")


def _tenant(name: str):
    tenant = users.find_tenant(name)
    if tenant is None:
        raise click.ClickException(f"no workspace named {name!r}")
    return tenant


@quotas_cli.command("show")
@click.argument("tenant_name")
def show_quotas(tenant_name: str) -> None:
    """Each quota of a workspace: its limit (the deployment's, or set for it) and use."""
    tenant = _tenant(tenant_name)
    for row in quotas.usage(tenant):
        where = f"set for {tenant.name}" if row["overridden"] else "the deployment's"
        used = "" if row["used"] is None else f", {row['used']} in use"
        click.echo(f"{row['name']}: {row['limit']} ({where}){used}")


@quotas_cli.command("set")
@click.argument("tenant_name")
@click.argument("name", type=click.Choice(list(quotas.QUOTAS)))
@click.argument("value")
def set_quota(tenant_name: str, name: str, value: str) -> None:
    """Set NAME for one workspace to VALUE (a whole number), or `default` to follow the
    deployment's setting again."""
    tenant = _tenant(tenant_name)
    try:
        quotas.set_override(tenant, name, None if value == "default" else int(value))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    audit.record(tenant, audit.SystemActor("cli"), "quota.set", "tenant", tenant.id,
                 {"quota": name, "limit": value})
    db.session.commit()
    click.echo(f"{name} for {tenant.name}: {quotas.limit(tenant, name)}")
