"""Sandbox configs: the stored document, its secrets, endpoints and network policy, the
provider it names, the snapshot ledger, templates and the connectivity check.
"""
