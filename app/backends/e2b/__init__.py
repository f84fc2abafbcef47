"""The E2B-API backends: E2B itself and Cube, which speaks the same API (common, io and
templates are shared).
"""
