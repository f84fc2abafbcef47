"""Crypto, token, API-key and redaction primitives (no models, no requests)."""
