"""Issue 28 item 5: an install says "register the skill again" only when that would help,
that is when the stored archive is really gone or damaged; a store it cannot reach says
to try again (the archive is still there). Real stores: a directory and an S3 endpoint
on a closed loopback port."""

from __future__ import annotations

import io
import socket

import pytest

from app.services.skills import store
from app.services.skills.installs import pipeline
from app.services.skills.installs.run import RunFailed
from app.storage import blobstore
from tests.fakes.skill_archives import make_zip, skill_md


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def stored(app):
    blob = store.blobs().put(io.BytesIO(make_zip({"SKILL.md": skill_md("kept")})), "t1")
    return blob.key


def test_an_archive_that_is_there_is_read(stored):
    assert "SKILL.md" in pipeline.read_bundle(stored).data


def test_a_missing_archive_asks_to_register_the_skill_again(app, stored):
    store.blobs().delete(stored)
    with pytest.raises(RunFailed, match="is gone; register the skill again"):
        pipeline.read_bundle(stored)


def test_a_damaged_archive_asks_to_register_the_skill_again(app):
    key = store.blobs().put(io.BytesIO(b"not a zip at all"), "t1").key
    with pytest.raises(RunFailed, match="is damaged; register the skill again"):
        pipeline.read_bundle(key)


def test_an_unreachable_store_says_to_try_again_not_to_register_again(app, stored, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setitem(app.config, "SKILL_BUNDLE_STORE",
                        f"s3://bundles?endpoint=http://127.0.0.1:{_closed_port()}")
    assert isinstance(store.blobs(), blobstore.S3BlobStore)
    with pytest.raises(RunFailed) as failed:
        pipeline.read_bundle(stored)
    assert "could not be read" in str(failed.value) and "archive is kept" in str(failed.value)
    assert "register" not in str(failed.value) and "127.0.0.1" not in str(failed.value)
