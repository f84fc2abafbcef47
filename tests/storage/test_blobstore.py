"""The bundle blob store: content-addressed, atomic, keys that cannot escape; the same
contract on a directory and on S3 (a moto server on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from app.storage import blobstore
from app.storage.blobstore import BlobMissing, FileBlobStore, S3BlobStore, from_settings


@pytest.fixture(params=["directory", "s3"])
def store(request, tmp_path):
    if request.param == "directory":
        return FileBlobStore(tmp_path / "bundles")
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = f"bundles-{os.urandom(4).hex()}"
    made = from_settings("", f"s3://{bucket}/sandlot/skills?endpoint={endpoint}&region=eu-west-1")
    made.client.create_bucket(Bucket=bucket,
                              CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    return made


def test_put_is_content_addressed_and_dedupes(store):
    data = os.urandom(300_000)
    first = store.put(io.BytesIO(data), "t1")
    again = store.put(io.BytesIO(data), "t1")
    assert first == again
    assert first.key == f"t1/{hashlib.sha256(data).hexdigest()}.zip"
    assert first.size == len(data)
    with store.open(first.key) as handle:
        assert handle.read() == data
    assert store.exists(first.key)


def test_namespaces_keep_workspaces_apart(store):
    a = store.put(io.BytesIO(b"same"), "t1")
    b = store.put(io.BytesIO(b"same"), "t2")
    assert a.key != b.key and a.sha256 == b.sha256
    store.delete(a.key)
    assert not store.exists(a.key) and store.exists(b.key)


def test_delete_and_missing(store):
    blob = store.put(io.BytesIO(b"bytes"), "t1")
    store.delete(blob.key)
    store.delete(blob.key)  # deleting twice is fine
    with pytest.raises(BlobMissing):
        with store.open(blob.key):
            pass


@pytest.mark.parametrize("key", ["../etc/passwd", "t1/../../x.zip", "/abs/key.zip", "t1/abc.zip",
                                 "t1/" + "g" * 64 + ".zip"])
def test_keys_that_are_not_ours_never_touch_storage(store, key):
    assert not store.exists(key)
    with pytest.raises(BlobMissing):
        with store.open(key):
            pass


def test_bad_namespaces_are_refused(store):
    with pytest.raises(ValueError):
        store.put(io.BytesIO(b"x"), "../up")


def test_a_failed_directory_write_leaves_no_partial_blob(tmp_path):
    store = FileBlobStore(tmp_path)

    class Broken(io.BytesIO):
        def read(self, *args):
            if self.tell() > 0:
                raise OSError("disk went away")
            return super().read(5)

    with pytest.raises(OSError):
        store.put(Broken(b"0123456789"), "t1")
    assert list((tmp_path / "t1").iterdir()) == []


def test_s3_objects_live_under_the_prefix(moto_endpoint):
    store = from_settings("", f"s3://pfx-bucket/a/b?endpoint={moto_endpoint}")
    assert isinstance(store, S3BlobStore)
    store.client.create_bucket(Bucket="pfx-bucket")
    blob = store.put(io.BytesIO(b"abc"), "t9")
    keys = [o["Key"] for o in store.client.list_objects_v2(Bucket="pfx-bucket")["Contents"]]
    assert keys == [f"a/b/{blob.key}"]


def test_settings_pick_the_store(tmp_path):
    assert isinstance(from_settings(str(tmp_path), ""), FileBlobStore)
    assert isinstance(from_settings("", f"file://{tmp_path}"), FileBlobStore)
    with pytest.raises(ValueError):
        from_settings("", "ftp://x/y")
    assert blobstore.blob_key("t1", "a" * 64) == "t1/" + "a" * 64 + ".zip"
