"""Skills: the tenant's catalog, bundle parsing and storage, sources, the skills installed on a
config, running them, and the install runs (installs/).
"""
