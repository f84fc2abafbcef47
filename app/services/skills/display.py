"""Display names for catalog rows older than the column (migration 5d1e0a7c3b92 gave them
''), taken from the SKILL.md frontmatter of their stored bundle the first time they are
read, and kept, so each old row costs one bundle read once.

A row registered since then always has its display name (the frontmatter's `displayName`,
else `name`, else `slug`), which may rightly equal the slug; only '' is repaired.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Callable, Iterable

from app.errors import AppError
from app.extensions import db
from app.models import SkillCatalogEntry
from app.services.skills import names as skill_names
from app.services.skills.manifest import parse_skill_md
from app.storage import blobstore

log = logging.getLogger("sandlot.skills")
SKILL_MD_MAX = 256 * 1024  # the frontmatter is at most 64 KiB; the body is not needed


def fill_missing(entries: Iterable[SkillCatalogEntry],
                 store: Callable[[], blobstore.BlobStore]) -> None:
    """Give every entry without a display name the one its stored SKILL.md declares, and
    commit them. A bundle that cannot be read leaves the row as it is (shown by its slug)
    and is tried again on a later read."""
    changed = False
    for entry in entries:
        if entry.display_name:
            continue
        display = _from_bundle(entry, store)
        if display:
            entry.display_name = display[:skill_names.DISPLAY_MAX]
            changed = True
    if changed:
        db.session.commit()


def _from_bundle(entry: SkillCatalogEntry,
                 store: Callable[[], blobstore.BlobStore]) -> str | None:
    try:
        with store().open(entry.bundle_ref) as archive, zipfile.ZipFile(archive) as bundle:
            info = bundle.getinfo("SKILL.md")
            with bundle.open(info) as handle:
                raw = handle.read(SKILL_MD_MAX)
        return parse_skill_md(raw).display_name
    except (blobstore.BlobStoreError, KeyError, zipfile.BadZipFile, AppError) as exc:
        log.warning("catalog entry %s: no display name from its bundle (%s)", entry.id,
                    type(exc).__name__)
        return None
