"""Sandbox config pages: list, editor form, check, sessions and templates."""
