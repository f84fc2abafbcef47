"""GET /api/v1/skills?sandbox_config_id= (issue 13 item 5): {name, description} of the
enabled, usable skills of that config only, `skills_available`, API keys refused."""

from __future__ import annotations

from app.extensions import db
from app.models import InstallStatus
from tests.personal.helpers import config, declare, skill, unready

SKILLS = "/api/v1/skills"


def test_only_enabled_ready_skills_of_that_config(two_tenants, bearer, key_client):
    a, b = two_tenants
    cfg, other = config(a.tenant, "one"), config(a.tenant, "two")
    ready = skill(a.tenant, cfg, declare("X"), name="bravo", description="does bravo")
    skill(a.tenant, cfg, [], name="alpha", description="does alpha")
    skill(a.tenant, cfg, [], name="off", enabled=False)
    unready(skill(a.tenant, cfg, [], name="broken"))
    installing = skill(a.tenant, cfg, [], name="fresh")
    unready(installing, status=InstallStatus.installing)
    skill(a.tenant, other, [], name="elsewhere")
    viewer = bearer(a.viewer, a.tenant)
    body = viewer.get(f"{SKILLS}?sandbox_config_id={cfg}").json
    assert body == {"success": True, "skills_available": True, "data": [
        {"name": "alpha", "description": "does alpha"},
        {"name": "bravo", "description": "does bravo"}], "next_cursor": None, "total": 2}
    ready.enabled = False
    db.session.commit()
    names = [s["name"] for s in viewer.get(f"{SKILLS}?sandbox_config_id={cfg}").json["data"]]
    assert names == ["alpha"]
    empty = config(a.tenant, "three")
    assert viewer.get(f"{SKILLS}?sandbox_config_id={empty}").json == {
        "success": True, "data": [], "skills_available": False, "next_cursor": None,
        "total": 0}
    assert bearer(b.owner, b.tenant).get(f"{SKILLS}?sandbox_config_id={cfg}").status_code == 404
    assert key_client(a.tenant).get(f"{SKILLS}?sandbox_config_id={cfg}").status_code == 403
    assert viewer.get(f"{SKILLS}?sandbox_config_id=x&other=1").status_code == 400
