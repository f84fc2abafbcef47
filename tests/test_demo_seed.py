"""`flask demo seed`: the demo workspace, printed working credentials, a Docker config."""

from __future__ import annotations

import re

from sqlalchemy import func, select

from app.extensions import db
from app.models import SandboxConfig

CREDENTIAL = re.compile(r"(\S+@demo\.sandlot\.local)\s+password: (\S+)")


def seed(app) -> dict[str, str]:
    result = app.test_cli_runner().invoke(args=["demo", "seed"])
    assert result.exit_code == 0, result.output
    assert "sandbox config: Local Docker" in result.output
    return dict(CREDENTIAL.findall(result.output))


def test_seed_prints_credentials_that_sign_in(app, client):
    credentials = seed(app)
    assert set(credentials) == {"admin@demo.sandlot.local", "member@demo.sandlot.local"}
    for email, password in credentials.items():
        response = client.post("/api/v1/auth/login", json={"email": email, "password": password})
        assert response.status_code == 200, response.json


def test_seed_again_refreshes_passwords_and_keeps_one_docker_config(app, client):
    first = seed(app)
    second = seed(app)
    email = "admin@demo.sandlot.local"
    assert first[email] != second[email]
    stale = client.post("/api/v1/auth/login", json={"email": email, "password": first[email]})
    assert stale.status_code == 401
    count = db.session.scalar(select(func.count()).select_from(SandboxConfig))
    assert count == 1
    config = db.session.scalar(select(SandboxConfig))
    assert config.config["docker"]["image"] == "sandlot/sandbox:base"
