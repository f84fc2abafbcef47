"""Catalog rows registered before display names existed (migration 5d1e0a7c3b92 left them
'') show the name their stored SKILL.md declares, not the slug; the repair is kept."""

from __future__ import annotations

import io

from app.extensions import db
from app.models import SkillCatalogEntry
from app.services import audit
from app.services.skills import catalog
from tests.fakes.skill_archives import make_zip, skill_md


def _old_row(tenant, name: str) -> SkillCatalogEntry:
    entry = catalog.register_upload(tenant, audit.SystemActor("test"),
                                   io.BytesIO(make_zip({"SKILL.md": skill_md(name)})))
    entry.display_name = ""  # as the migration left rows registered before the column
    db.session.commit()
    return entry


def test_an_old_row_shows_the_name_its_skill_md_declares(two_tenants):
    a, _ = two_tenants
    entry = _old_row(a.tenant, "数据 分析 Report")
    assert entry.name != "数据 分析 Report"  # the slug is derived, so it differs
    listed = {v["id"]: v for v in catalog.list_catalog(a.tenant)}
    assert listed[entry.id]["display_name"] == "数据 分析 Report"
    db.session.expire_all()
    assert db.session.get(SkillCatalogEntry, entry.id).display_name == "数据 分析 Report"


def test_a_bundle_that_cannot_be_read_falls_back_to_the_slug(two_tenants):
    a, _ = two_tenants
    entry = _old_row(a.tenant, "Word Tools")
    entry.bundle_ref = entry.bundle_ref + "-gone"
    db.session.commit()
    listed = {v["id"]: v for v in catalog.list_catalog(a.tenant)}
    assert listed[entry.id]["display_name"] == entry.name
    db.session.expire_all()
    assert db.session.get(SkillCatalogEntry, entry.id).display_name == ""
