"""Storage that is not a sandbox provider: the content-addressed skill bundle blob store (a
directory or S3).
"""
