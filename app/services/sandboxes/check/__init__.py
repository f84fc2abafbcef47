"""The sandbox check (reference 5): `job` starts and runs it, `run` performs the checks,
`probe` the egress probes, `parts` the shared pieces.
"""
