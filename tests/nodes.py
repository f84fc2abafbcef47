"""A node of the local engine in the test process (issue 28 item 2), for tests whose app
owns no engine and so reaches it only through a node over the real Redis."""

from __future__ import annotations

import os
import threading
import time

import pytest
from flask import Flask

from app.services.sandboxes import node_host, nodes
from tests.backends.conftest import require_docker


def own_no_engine(app: Flask, monkeypatch) -> Flask:
    """`app`, for this test, as a web host on a machine without an engine."""
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.fail("TEST_REDIS_URL is not set (source /tmp/testenv.sh)")
    require_docker()
    monkeypatch.setitem(app.config, "SANDBOX_OWN_ENGINES", [])
    monkeypatch.setitem(app.config, "REDIS_URL", url)
    return app


class RunningNode:
    """`flask node` for the local engine, in a thread, live when constructed."""

    def __init__(self, app: Flask):
        self.node = node_host.make_node(app, ["local"])
        self.thread = threading.Thread(target=self.node.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        with app.app_context():
            while not nodes.live_nodes("local") and time.monotonic() < deadline:
                time.sleep(0.05)

    def stop(self) -> None:
        self.node.stopping.set()
        self.thread.join(timeout=10)
