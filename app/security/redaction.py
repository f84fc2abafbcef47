"""Masking of secrets on the way out, and keeping stored secrets on the way in."""

from __future__ import annotations

MASK = "***"


def mask(value: str | None) -> str:
    """A set secret reads as `***`; an unset one stays empty."""
    return MASK if value else ""


def keep_or_replace(incoming: str | None, stored: str | None) -> str | None:
    """On update, `***`, `""` or absence keep the stored secret; anything else replaces it."""
    if incoming is None or incoming == "" or incoming == MASK:
        return stored
    return incoming


def mask_mapping(values: dict[str, str]) -> dict[str, str]:
    return {key: mask(value) for key, value in values.items()}


def merge_mapping(incoming: dict[str, str], stored: dict[str, str]) -> dict[str, str]:
    """Keys absent from `incoming` are deleted; masked or empty values keep the stored one."""
    return {key: keep_or_replace(value, stored.get(key)) or "" for key, value in incoming.items()}
