"""Property-based fuzzing of every documented operation against the live app (schemathesis 4):
no 5xx, responses match their schemas, statuses are documented.

Two passes: as a tenant owner with a bearer token, and with a full-access API key (only the
operations whose guard takes keys). Fuzzed DELETE/PATCH calls may remove or demote the very
owner the pass signs in as, or revoke its key; every example therefore starts by putting the
caller's membership and key back, so one example cannot break the rest.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import select, update

from app.extensions import db
from app.models import ApiKey, Membership, Role, User
from tests import factories
from tests.sweeps import routes, world

DOCUMENT = routes.collection_app().test_client().get("/api/v1/openapi.json").get_json()
CONFIG = schemathesis.Config.from_dict({
    "seed": 20261130,
    "generation": {"deterministic": True, "database": "none"},
    "phases": {"stateful": {"enabled": False}},
})
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT, config=CONFIG)
KEY_OPERATIONS = [op["operationId"] for ops in DOCUMENT["paths"].values() for op in ops.values()
                  if {"apiKeyAuth": []} in op.get("security", [])]
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]
BOUNDED = settings(max_examples=30, derandomize=True, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck), print_blob=True)


def build_world() -> dict:
    """A workspace to fuzz in (the signing-in owner plus rows to act on) and a foreign one."""
    fuzz = factories.make_tenant("Fuzz")
    other = factories.make_tenant("Other")
    owner = factories.make_user("owner@fuzz.test", fuzz, Role.owner)
    for role in (Role.admin, Role.viewer):
        factories.make_user(f"{role.value}@fuzz.test", fuzz, role)
    factories.make_user("owner@other.test", other, Role.owner)
    key, plaintext = factories.make_key(fuzz, name="fuzz auth key")
    factories.make_key(fuzz, name="fuzz target key")
    factories.make_key(other, name="other key")
    for tenant in (fuzz, other):
        routes.PARAM_ROWS["job_id"](factories.TenantUsers(tenant))
    membership = db.session.scalar(select(Membership).filter_by(user_id=owner.id))
    return {"tenant_id": fuzz.id, "user_id": owner.id, "membership_id": membership.id,
            "key_id": key.id, "key": plaintext}


@pytest.fixture
def fuzz(app):
    ids = world.built_once("fuzz", build_world)
    user = db.session.get(User, ids["user_id"])
    bearer = factories_token(app, user, ids["tenant_id"])
    return {**ids, "bearer": bearer}


def factories_token(app, user: User, tenant_id: int) -> str:
    from app.security import tokens

    claims = tokens.TokenClaims(user.id, tenant_id, user.session_version)
    return tokens.issue(claims, app.config["SECRET_KEY"], 3600)[0]


def put_back(ids: dict) -> None:
    """Undo what a previous example may have done to the caller itself."""
    db.session.rollback()
    membership = db.session.scalar(select(Membership).filter_by(
        user_id=ids["user_id"], tenant_id=ids["tenant_id"]))
    if membership is None:
        db.session.add(Membership(user_id=ids["user_id"], tenant_id=ids["tenant_id"],
                                  role=Role.owner))
    elif membership.role != Role.owner:
        membership.role = Role.owner
    db.session.execute(update(ApiKey).where(ApiKey.id == ids["key_id"])
                       .values(revoked_at=None, expires_at=None))
    db.session.commit()
    db.session.expunge_all()


@SCHEMA.parametrize()
@BOUNDED
def test_as_owner_with_bearer(case, live_server, fuzz):
    put_back(fuzz)
    case.call_and_validate(base_url=live_server, checks=CHECKS,
                           headers={"Authorization": f"Bearer {fuzz['bearer']}"})


@SCHEMA.include(operation_id=KEY_OPERATIONS).parametrize()
@BOUNDED
def test_with_full_access_key(case, live_server, fuzz):
    put_back(fuzz)
    case.call_and_validate(base_url=live_server, checks=CHECKS,
                           headers={"X-API-Key": fuzz["key"]})
