"""Bootstrap commands of decisions 3: tenants, users, api-keys."""

from __future__ import annotations

from sqlalchemy import select, text

from app.extensions import db
from app.models import ApiKey, Membership, Role, User


def run(app, *args: str):
    return app.test_cli_runner().invoke(args=list(args))


def test_tenant_user_and_key_bootstrap(app, client):
    assert run(app, "tenants", "create", "Acme").exit_code == 0
    result = run(app, "users", "create", "ops@acme.test", "--password", "long-enough-1",
                 "--tenant", "Acme", "--role", "admin")
    assert result.exit_code == 0, result.output
    user = db.session.scalar(select(User).where(User.email == "ops@acme.test"))
    role = db.session.scalar(select(Membership.role).where(Membership.user_id == user.id))
    assert role == Role.admin

    result = run(app, "api-keys", "create", "--tenant", "Acme", "--name", "ci", "--full-access")
    assert result.exit_code == 0, result.output
    plaintext = result.stdout.strip().splitlines()[-1]
    assert plaintext.startswith("sl_")
    me = client.get("/api/v1/auth/me", headers={"X-API-Key": plaintext})
    assert me.status_code == 200
    assert me.json["data"]["tenant"]["name"] == "Acme"
    assert me.json["data"]["api_key"]["full_access"] is True

    secret = plaintext.split("_", 2)[2]  # sl_<prefix>_<secret>; the secret itself may hold "_"
    assert len(secret) == 43
    for row in db.session.execute(text("SELECT * FROM api_keys")).all():
        for value in row:
            assert plaintext not in str(value) and secret not in str(value)
    assert db.session.scalar(select(ApiKey.prefix)) in plaintext


def test_bad_input_is_a_clear_cli_error_and_writes_nothing(app):
    assert run(app, "tenants", "create", "Dup").exit_code == 0
    result = run(app, "tenants", "create", "Dup")
    assert result.exit_code != 0 and "already exists" in result.output
    result = run(app, "users", "create", "x@y.test", "--password", "short", "--tenant", "Dup")
    assert result.exit_code != 0 and "at least 8" in result.output
    assert db.session.scalar(select(User).where(User.email == "x@y.test")) is None
    result = run(app, "api-keys", "create", "--tenant", "Nope", "--name", "k", "--full-access")
    assert result.exit_code != 0 and "no workspace" in result.output
    result = run(app, "api-keys", "create", "--tenant", "Dup", "--name", "k")
    assert result.exit_code != 0 and "capability" in result.output
