"""Issue 15 item 2: a role is described by what its guards really let it do, and an API
key's capability by what it allows, not by its code."""

from __future__ import annotations

from app.models import Role
from app.models.tenant import ROLE_ORDER
from app.web._format import CAPABILITY_LABELS, ROLE_HELP
from tests import factories
from tests.sweeps import routes

CHANGES = ("create", "change", "add", "delete", "manage", "edit")


def routes_open_to(app, role: Role) -> set[str]:
    """Guarded routes whose required role `role` meets (API-key-only routes aside)."""
    return {r.id for r in routes.iter_routes(app)
            if r.guard is not None and r.guard.role is not None
            and ROLE_ORDER.index(role) >= ROLE_ORDER.index(r.guard.role)}


def test_a_role_that_can_change_nothing_does_not_say_it_can(app):
    for role in ROLE_ORDER:
        below = ROLE_ORDER[:ROLE_ORDER.index(role)]
        mutating = {i for i in routes_open_to(app, role)
                    if not i.startswith("GET ")} - set().union(
            *(routes_open_to(app, r) for r in below))
        words = ROLE_HELP[role.value].lower()
        # The owner's extra power lives in the members service (owner rules), not a guard.
        if not mutating and role not in (Role.viewer, Role.owner):
            # Nothing beyond the role below: the description must say so, not promise more.
            assert not any(verb in words.split("cannot")[0] for verb in CHANGES), (role, words)
            assert "same as" in words
    assert routes_open_to(app, Role.contributor) == routes_open_to(app, Role.viewer)


def test_the_dashboard_describes_the_contributor_role_truthfully(two_tenants, login_as):
    a, _ = two_tenants
    page = login_as(a.contributor, a.tenant).get("/").get_data(as_text=True)
    assert "Can create and change" not in page
    assert ROLE_HELP["contributor"] in page


def test_api_key_capabilities_are_named_by_what_they_allow(two_tenants, login_as):
    a, _ = two_tenants
    factories.make_key(a.tenant, full_access=False, capabilities=("manage_vector_stores",),
                       name="checker")
    page = login_as(a.admin, a.tenant).get("/api-keys").get_data(as_text=True)
    assert CAPABILITY_LABELS["manage_vector_stores"] in page
    assert ">manage_vector_stores<" not in page
