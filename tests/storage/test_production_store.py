"""Production with Redis runs on several hosts, so the bundle store must be one they all
read (decisions 17): an object store, or a directory the operator says is shared;
otherwise the app refuses to start, saying why and the two ways out."""

from __future__ import annotations

import io
import os

import pytest
from cryptography.fernet import Fernet

from app import create_app
from app.services.skills import store as bundle_store

PRODUCTION = {"ENV": "production", "SECRET_KEY": "k" * 40,
              "SECRETS_KEYS": [Fernet.generate_key().decode()],
              "SQLALCHEMY_DATABASE_URI": "sqlite://", "REDIS_URL": "redis://127.0.0.1:9/0",
              "SKILL_BUNDLE_DIR": "/var/lib/sandlot/bundles", "SKILL_BUNDLE_STORE": "",
              "SKILL_BUNDLE_DIR_SHARED": False,
              # The limiter is one object per process: an app on the closed Redis would
              # rebind every later test's sign-in limits to it.
              "RATELIMIT_STORAGE_URI": "memory://"}


@pytest.mark.parametrize("store", ["", "file:///var/lib/sandlot/bundles"])
def test_production_with_redis_refuses_a_local_bundle_directory(store):
    with pytest.raises(RuntimeError) as raised:
        create_app({**PRODUCTION, "SKILL_BUNDLE_STORE": store})
    sentence = str(raised.value)
    assert sentence.startswith("Sandlot refuses to start")
    assert "SKILL_BUNDLE_STORE" in sentence and "s3://" in sentence
    assert "SKILL_BUNDLE_DIR_SHARED=true" in sentence
    assert "/var/lib" not in sentence  # names the settings, not the server's paths


def test_production_with_redis_starts_on_a_shared_directory():
    app = create_app({**PRODUCTION, "SKILL_BUNDLE_DIR_SHARED": True})
    assert app.config["SKILL_BUNDLE_DIR_SHARED"] is True


def test_production_without_redis_keeps_its_local_directory():
    create_app({**PRODUCTION, "REDIS_URL": None})  # one box: as before


def test_production_with_redis_starts_on_s3_and_stores_there(moto_endpoint):
    bucket = f"bundles-{os.urandom(4).hex()}"
    app = create_app({**PRODUCTION, "SKILL_BUNDLE_STORE":
                      f"s3://{bucket}/sandlot?endpoint={moto_endpoint}&region=eu-west-1"})
    with app.app_context():
        blobs = bundle_store.blobs()
        blobs.client.create_bucket(Bucket=bucket,
                                   CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        blob = blobs.put(io.BytesIO(b"bundle bytes"), "t1")
        assert blobs.exists(blob.key)
