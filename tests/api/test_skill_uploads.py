"""Oversize uploads are refused while streaming (413), after reading at most the limit, in
bounded memory, and store nothing; the route lifts the 1 MiB JSON cap for itself only."""

from __future__ import annotations

import io
import tracemalloc

import pytest
from sqlalchemy import func, select

from app.extensions import db
from app.models import SkillCatalogEntry
from tests.fakes import skill_registry
from tests.fakes.skill_archives import make_zip, skill_files

BASE = "/api/v1/skills/catalog"
MiB = 1024 * 1024
bundle_dir = skill_registry.bundle_dir  # fixture
CHUNKED = {"wsgi.input_terminated": True, "HTTP_TRANSFER_ENCODING": "chunked"}


class Endless(io.RawIOBase):
    """A request body produced on demand; counts what the server actually read."""

    def __init__(self, total: int, prefix: bytes = b""):
        self.total, self.prefix, self.sent = total, prefix, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:  # the test client measures the body by seeking
        return True

    def tell(self) -> int:
        return getattr(self, "_at_end", False) and self.total or self.sent

    def seek(self, offset: int, whence: int = 0) -> int:
        self._at_end = whence == 2
        return self.tell()

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self.total - self.sent)
        chunk = (self.prefix[self.sent:self.sent + size]).ljust(size, b"\0")
        buffer[:size] = chunk
        self.sent += size
        return size


@pytest.fixture
def small_limit(app, monkeypatch):
    """A 1 MB bundle limit (MAX_FILE_SIZE_MB lowered too, since it is the floor)."""
    monkeypatch.setitem(app.config, "MAX_SKILL_BUNDLE_SIZE_MB", 1)
    monkeypatch.setitem(app.config, "MAX_FILE_SIZE_MB", 1)


@pytest.fixture
def admin(two_tenants, bearer, bundle_dir):
    a, _ = two_tenants
    return bearer(a.admin, a.tenant)


def stored_nothing(directory) -> bool:
    rows = db.session.scalar(select(func.count()).select_from(SkillCatalogEntry))
    return rows == 0 and (not directory.exists() or skill_registry.stored_blobs(directory) == [])


def test_a_chunked_oversize_zip_is_refused_after_reading_about_the_limit(
        admin, small_limit, bundle_dir):
    body = Endless(50 * MiB, prefix=b"PK\x03\x04")
    tracemalloc.start()
    response = admin.post(BASE, input_stream=body, content_type="application/zip",
                          environ_overrides=CHUNKED)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert response.status_code == 413
    assert response.json["error"] == {"code": "payload_too_large",
                                      "message": "skill bundle cannot exceed 1 MB"}
    assert body.sent <= MiB + 128 * 1024, f"read {body.sent} bytes of a 50 MiB body"
    assert peak < 4 * MiB, f"peak {peak} bytes"
    assert stored_nothing(bundle_dir)


def test_a_chunked_oversize_multipart_upload_is_refused_while_streaming(
        admin, small_limit, bundle_dir):
    head = (b"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; "
            b"filename=\"big.zip\"\r\nContent-Type: application/zip\r\n\r\nPK\x03\x04")
    body = Endless(50 * MiB, prefix=head)
    tracemalloc.start()
    response = admin.post(BASE, input_stream=body,
                          content_type="multipart/form-data; boundary=b0undary",
                          environ_overrides=CHUNKED)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert response.status_code == 413
    assert response.json["error"]["message"] == "skill bundle cannot exceed 1 MB"
    assert body.sent <= 2 * MiB + 128 * 1024
    assert peak < 6 * MiB, f"peak {peak} bytes"
    assert stored_nothing(bundle_dir)


def test_a_declared_length_over_the_cap_is_refused_before_reading(admin, small_limit,
                                                                   bundle_dir):
    body = Endless(50 * MiB)
    response = admin.post(BASE, input_stream=body, content_type="application/zip",
                          environ_overrides={"CONTENT_LENGTH": str(50 * MiB)})
    assert response.status_code == 413
    assert response.json["error"]["message"] == "skill bundle cannot exceed 1 MB"
    assert body.sent == 0
    assert stored_nothing(bundle_dir)


def test_a_multipart_upload_just_under_the_limit_is_accepted(admin, small_limit):
    import os

    data = make_zip({**skill_files(), "noise.bin": os.urandom(900 * 1024)})
    assert 900 * 1024 < len(data) < MiB
    response = admin.post(BASE, data={"file": (io.BytesIO(data), "skill.zip")},
                          content_type="multipart/form-data")
    assert response.status_code == 201, response.json


def test_the_raised_limit_is_for_this_route_only(admin, app):
    assert app.config["MAX_CONTENT_LENGTH"] == MiB
    big = make_zip(skill_files()) + b"\0" * (2 * MiB)
    assert admin.post("/api/v1/sandbox-configs", data=big,
                      content_type="application/json").status_code == 413
