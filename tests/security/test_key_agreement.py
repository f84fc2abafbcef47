"""The start check that the processes of one deployment hold the same keys (issue 28
item 1): each announces a fingerprint of SECRET_KEY and of its SECRETS_KEYS set in Redis,
and a process that meets a live one holding other keys warns, naming which key differs,
never a key or anything derived from it. Runs against the real Redis (TEST_REDIS_URL)."""

from __future__ import annotations

import logging
import uuid

import pytest
from cryptography.fernet import Fernet

from app import create_app
from app.security import key_agreement
from tests.jobs.conftest import redis_url  # noqa: F401  (fixture)

KEY_A, KEY_B = "a" * 40 + "-secret-key-one", "b" * 40 + "-secret-key-two"
FERNET_A, FERNET_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def deployment(redis_url):  # noqa: F811
    """build(**keys) -> a started app of one fresh deployment (its own database name)."""
    database = f"sqlite:///key-agreement-{uuid.uuid4().hex}.db"
    announcers = []

    def build(secret_key: str, secrets_keys: list[str]):
        app = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": database,
                          "REDIS_URL": redis_url, "SECRET_KEY": secret_key,
                          "SECRETS_KEYS": secrets_keys})
        announcers.append(key_agreement.start(app, renew=False))
        return app

    yield build
    for announcer in announcers:
        announcer.stop()


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "sandlot.keys" and r.levelno >= logging.WARNING]


def assert_no_key_material(text: str) -> None:
    for secret in (KEY_A, KEY_B, FERNET_A, FERNET_B):
        assert secret not in text and secret[:12] not in text
        assert key_agreement.fingerprint(secret) not in text
    for keys in ([FERNET_A], [FERNET_B], [FERNET_A, FERNET_B]):
        assert key_agreement.fingerprints({"SECRET_KEY": "", "SECRETS_KEYS": keys})[
            "SECRETS_KEYS"] not in text


def test_a_process_with_another_secret_key_warns_naming_it(deployment, caplog):
    deployment(KEY_A, [FERNET_A])
    caplog.set_level(logging.INFO, logger="sandlot.keys")
    deployment(KEY_B, [FERNET_A])

    said = warnings_of(caplog)
    assert len(said) == 1, said
    assert said[0].startswith("SECRET_KEY differs ") and "SECRETS_KEYS" not in said[0]
    assert_no_key_material(caplog.text)


def test_the_process_already_running_warns_at_its_next_renewal_once(deployment, caplog):
    first = deployment(KEY_A, [FERNET_A])
    deployment(KEY_B, [FERNET_A])
    caplog.clear()
    caplog.set_level(logging.INFO, logger="sandlot.keys")
    announcer = first.extensions["sandlot_key_agreement"]
    announcer.beat()
    announcer.beat()

    said = warnings_of(caplog)
    assert len(said) == 1 and said[0].startswith("SECRET_KEY differs "), said


def test_another_key_set_is_named_too(deployment, caplog):
    deployment(KEY_A, [FERNET_A])
    caplog.set_level(logging.INFO, logger="sandlot.keys")
    deployment(KEY_B, [FERNET_B, FERNET_A])

    said = warnings_of(caplog)
    assert len(said) == 1 and said[0].startswith("SECRET_KEY and SECRETS_KEYS differ "), said
    assert_no_key_material(caplog.text)


def test_the_same_keys_give_no_warning(deployment, caplog):
    deployment(KEY_A, [FERNET_A, FERNET_B])
    caplog.set_level(logging.INFO, logger="sandlot.keys")
    deployment(KEY_A, [FERNET_B, FERNET_A])  # the same set: each reads what the other wrote

    assert warnings_of(caplog) == []


def test_another_deployment_on_the_same_redis_is_not_compared(deployment, redis_url,  # noqa: F811
                                                               caplog):
    deployment(KEY_A, [FERNET_A])
    other = create_app({"ENV": "testing", "SQLALCHEMY_DATABASE_URI": f"sqlite:///elsewhere-{uuid.uuid4().hex}.db",
                        "REDIS_URL": redis_url, "SECRET_KEY": KEY_B, "SECRETS_KEYS": [FERNET_B]})
    caplog.set_level(logging.INFO, logger="sandlot.keys")
    announcer = key_agreement.start(other, renew=False)
    try:
        assert warnings_of(caplog) == []
    finally:
        announcer.stop()


def test_without_redis_nothing_is_announced(caplog):
    app = create_app({"ENV": "testing", "REDIS_URL": None})
    caplog.set_level(logging.INFO, logger="sandlot.keys")
    assert key_agreement.start(app) is None
    assert caplog.records == []
