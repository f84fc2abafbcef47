"""Encryption at rest with MultiFernet over SECRETS_KEYS (newest key first)."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from flask import current_app


class SecretsUnavailable(RuntimeError):
    """No usable SECRETS_KEYS are configured."""


class Crypto:
    """Encrypts with the newest key, decrypts with any configured key."""

    def __init__(self, keys: list[str]):
        if not keys:
            raise SecretsUnavailable("SECRETS_KEYS is empty")
        try:
            self._fernet = MultiFernet([Fernet(k.encode()) for k in keys])
        except (ValueError, TypeError) as exc:
            raise SecretsUnavailable("SECRETS_KEYS holds a malformed key") from exc

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken as exc:
            raise SecretsUnavailable("a stored secret does not decrypt with SECRETS_KEYS") from exc

    def try_decrypt(self, token: str) -> str | None:
        """The plaintext, or None when no configured key opens `token` (a lost key)."""
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            return None

    def rotate(self, token: str) -> str:
        """Re-encrypt `token` under the newest key."""
        return self._fernet.rotate(token.encode()).decode()

    def is_current(self, token: str) -> bool:
        """True when `token` already decrypts with the newest key alone."""
        try:
            self._newest.decrypt(token.encode())
            return True
        except InvalidToken:
            return False

    @property
    def _newest(self) -> Fernet:
        return self._fernet._fernets[0]


def generate_key() -> str:
    return Fernet.generate_key().decode()


def crypto() -> Crypto:
    """The Crypto of the running app, built on first use from its config."""
    ext = current_app.extensions
    if "sandlot_crypto" not in ext:
        ext["sandlot_crypto"] = Crypto(current_app.config["SECRETS_KEYS"])
    return ext["sandlot_crypto"]
