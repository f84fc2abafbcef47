"""Skill installs that really happen (reference 7.2, 7.6, decisions 8).

- `events`: durable progress and transcript entries of one run (reference 7.3).
- `lock`: the per-config image lock (a Redis lease, or a database lease without Redis).
- `image`: the snapshot ledger (1.8) and the config's `skill_image` pointer.
- `plan`: the deterministic installer: seeding, commands, verification, env declarations.
- `pipeline`: one install run; `removal`: one uninstall run; `control`: stop and reap.
"""
