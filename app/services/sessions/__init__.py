"""Sandbox sessions: their lifecycle, running commands in them, binding to a sandbox, ending
them and removing their sandboxes, the workspace view, and runs.
"""
