"""Skill installs that really happen (reference 7.2, 7.6, decisions 8).

- `events`: durable progress and transcript entries of one run (reference 7.3).
- `lock`: the per-config image lock (a Redis lease, or a database lease without Redis).
- `run`, `watch`: the shared run (sandbox, lock lease, watchdog); `stream`: SSE progress.
- `plan`: the deterministic installer: seeding, commands, verification, env declarations.
- `pipeline`: one install run; `removal`: one uninstall run; `control`: stop and reap.

The snapshot ledger is `services/sandboxes/image.py`; wake-ups are `services/wakeups.py`.
"""
