"""Secrets at rest: key rotation (CLI and service), production refusing to start without
its keys, the masking helpers, and the crypto wrapper's failure modes."""

from __future__ import annotations

import re

import pytest
from cryptography.fernet import Fernet, InvalidToken

from app import create_app
from app.extensions import db
from app.security import redaction
from app.security.config_secrets import LostMapping, LostSecret
from app.security.crypto import Crypto, SecretsUnavailable
from app.services import key_rotation as secret_service
from tests import factories
from tests.sweeps import secrets as planted

# -- rotation ---------------------------------------------------------------------------


def test_rotation_re_encrypts_old_values_under_the_newest_key(app):
    old, new = planted.new_key(), planted.new_key()
    with planted.vault() as table:
        with planted.using_keys(app, [old]):
            db.session.execute(table.insert(), [
                {"label": "a", "secret": "alpha-secret", "doc": {"token": "alpha"}},
                {"label": "b", "secret": "beta-secret", "doc": None},
                {"label": "c", "secret": None, "doc": None},
            ])
            db.session.commit()
            before = planted.raw_tokens(table, "secret")
        with planted.using_keys(app, [new, old]):
            report = secret_service.rotate_all([table])
            after = planted.raw_tokens(table, "secret") + planted.raw_tokens(table, "doc")
            again = secret_service.rotate_all([table])
        with planted.using_keys(app, [new]):  # the old key is gone
            rows = {r.label: r for r in db.session.execute(table.select())}

    name = table.name
    assert report.rotated == {f"{name}.secret": 2, f"{name}.doc": 1}
    assert report.current == {f"{name}.secret": 0, f"{name}.doc": 0}
    assert report.total_rotated == 3
    assert again.rotated == {f"{name}.secret": 0, f"{name}.doc": 0}
    assert again.current == {f"{name}.secret": 2, f"{name}.doc": 1}
    assert set(before).isdisjoint(after)
    for token in after:
        Fernet(new.encode()).decrypt(token.encode())  # the newest key alone reads it
        with pytest.raises(InvalidToken):
            Fernet(old.encode()).decrypt(token.encode())
        assert "alpha" not in token and "beta" not in token
    assert rows["a"].secret == "alpha-secret" and rows["a"].doc == {"token": "alpha"}
    assert rows["b"].secret == "beta-secret" and rows["c"].secret is None


def test_reading_with_a_key_that_was_never_used_reads_unset_and_flagged(app):
    """Issue 14 item 5: a value no key opens is blank and marked lost, not an exception
    that fails every request touching the row; written back, it keeps its token."""
    with planted.vault() as table:
        with planted.using_keys(app, [planted.new_key()]):
            db.session.execute(table.insert(), [{"label": "a", "secret": "s", "doc": {"k": 1}}])
            db.session.commit()
            before = planted.raw_tokens(table, "secret") + planted.raw_tokens(table, "doc")
        with planted.using_keys(app, [planted.new_key()]):
            (row,) = db.session.execute(table.select()).all()
            assert row.secret == "" and isinstance(row.secret, LostSecret)
            assert row.doc == {} and isinstance(row.doc, LostMapping)
            db.session.execute(table.update().values(secret=row.secret, doc=row.doc))
            after = planted.raw_tokens(table, "secret") + planted.raw_tokens(table, "doc")
        assert after == before


def test_flask_secrets_rotate_reports_counts_for_every_encrypted_column(app):
    old, new = planted.new_key(), planted.new_key()
    tenant = factories.make_tenant("Rotation")
    with planted.using_keys(app, [old]):
        seeded = planted.seed_every_encrypted_column(tenant, "rotate-me")
        # A seeder may add rows to other encrypted tables too (a session needs a config):
        # count what is stored rather than assuming one value per column.
        stored = {f"{t.name}.{c}": len(planted.raw_tokens(t, c))
                  for t, c in secret_service.encrypted_columns()}
    with planted.using_keys(app, [new, old]):
        first = app.test_cli_runner().invoke(args=["secrets", "rotate"])
        second = app.test_cli_runner().invoke(args=["secrets", "rotate"])
    assert first.exit_code == 0, first.output
    if not seeded:
        assert first.output.strip() == "no encrypted columns hold values"
        return
    for column in seeded:
        assert stored[column] >= 1, f"the seeder of {column} stored nothing there"
    for column, count in stored.items():
        assert f"{column}: {count} re-encrypted, 0 already current" in first.output
        assert f"{column}: 0 re-encrypted, {count} already current" in second.output
    assert f"total: {sum(stored.values())} values re-encrypted" in first.output
    assert "total: 0 values re-encrypted" in second.output


def test_encrypted_columns_hold_no_plaintext(app):
    tenant = factories.make_tenant("At rest")
    planted.seed_every_encrypted_column(tenant, "plain-canary-at-rest")
    for table, column in secret_service.encrypted_columns():
        for token in planted.raw_tokens(table, column):
            assert "plain-canary-at-rest" not in token


# -- production configuration ------------------------------------------------------------

PRODUCTION = {"ENV": "production", "SECRET_KEY": "k" * 40,
              "SECRETS_KEYS": [Fernet.generate_key().decode()],
              "SQLALCHEMY_DATABASE_URI": "sqlite://"}


@pytest.mark.parametrize("missing", [
    ("SECRET_KEY",), ("SECRETS_KEYS",), ("SQLALCHEMY_DATABASE_URI",),
    ("SECRET_KEY", "SECRETS_KEYS", "SQLALCHEMY_DATABASE_URI"),
])
def test_production_refuses_to_start_without_its_keys(missing):
    config = {**PRODUCTION, **{name: None for name in missing}}
    with pytest.raises(RuntimeError) as raised:
        create_app(config)
    named = {"DATABASE_URL" if m.startswith("SQLALCHEMY") else m for m in missing}
    listed = set(re.findall(r"\b(SECRET_KEY|SECRETS_KEYS|DATABASE_URL)\b", str(raised.value)))
    assert listed == named, str(raised.value)


def test_production_starts_with_its_keys():
    app = create_app(dict(PRODUCTION))
    assert app.config["SESSION_COOKIE_SECURE"] is True


# -- masking helpers ---------------------------------------------------------------------

def test_mask():
    assert redaction.mask("hunter2") == "***"
    assert redaction.mask("") == ""
    assert redaction.mask(None) == ""
    assert redaction.mask_mapping({"A": "x", "B": ""}) == {"A": "***", "B": ""}


@pytest.mark.parametrize(("incoming", "stored", "kept"), [
    ("***", "old", "old"), ("", "old", "old"), (None, "old", "old"),
    ("new", "old", "new"), ("***", None, None), (" *** ", "old", " *** "),
])
def test_keep_or_replace(incoming, stored, kept):
    assert redaction.keep_or_replace(incoming, stored) == kept


def test_merge_mapping_keeps_masked_replaces_new_and_drops_absent():
    stored = {"KEEP": "s1", "EMPTY": "s2", "CHANGE": "s3", "GONE": "s4"}
    incoming = {"KEEP": "***", "EMPTY": "", "CHANGE": "fresh", "NEW": "n", "NEWMASKED": "***"}
    assert redaction.merge_mapping(incoming, stored) == {
        "KEEP": "s1", "EMPTY": "s2", "CHANGE": "fresh", "NEW": "n", "NEWMASKED": ""}


# -- the crypto wrapper ------------------------------------------------------------------

def test_crypto_refuses_no_keys_and_malformed_keys():
    with pytest.raises(SecretsUnavailable):
        Crypto([])
    with pytest.raises(SecretsUnavailable):
        Crypto(["not-a-fernet-key"])


def test_crypto_encrypts_with_the_newest_and_reads_with_any_key():
    old, new = planted.new_key(), planted.new_key()
    token = Crypto([old]).encrypt("value")
    both = Crypto([new, old])
    assert both.decrypt(token) == "value"
    assert not both.is_current(token)
    rotated = both.rotate(token)
    assert both.is_current(rotated) and Crypto([new]).decrypt(rotated) == "value"
    assert Crypto([new]).is_current(both.encrypt("v"))
    with pytest.raises(SecretsUnavailable):
        Crypto([planted.new_key()]).decrypt(token)
