"""Skill catalog pages: browse, add, manage."""
