"""Install streams over real HTTP: a threaded server on loopback per test, a skill row and
its events written the way the pipeline writes them (EventLog), and an SSE reader."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from werkzeug.serving import make_server

from app.extensions import db
from app.models import InstalledSkill, InstallStatus, SandboxConfig
from app.security import tokens

CONFIGS = "/api/v1/sandbox-configs"


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.fail("TEST_REDIS_URL is not set (see COMMON brief)")
    return url


@pytest.fixture
def serve():
    """serve(app) -> base URL of `app` on a threaded loopback server, shut down after."""
    servers = []

    def start(app) -> str:
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()


def token(app, user, tenant) -> dict[str, str]:
    claims = tokens.TokenClaims(user.id, tenant.id, user.session_version)
    value, _ = tokens.issue(claims, app.config["SECRET_KEY"], 600)
    return {"Authorization": f"Bearer {value}"}


def make_skill(tenant, status: InstallStatus = InstallStatus.installing,
               secret: str | None = None) -> InstalledSkill:
    """A config and a skill on it with run and session locators, as the pipeline leaves it."""
    config = SandboxConfig(id=str(uuid.uuid4()), tenant_id=tenant.id,
                           name=f"c-{uuid.uuid4().hex[:6]}", sandbox_type="docker",
                           config={"image": "sandlot/sandbox:base", "api_key": secret or ""})
    skill_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
    row = InstalledSkill(id=skill_id, tenant_id=tenant.id, sandbox_config_id=config.id,
                         name="watched", status=status, install_session_id=str(uuid.uuid4()),
                         install_message_id=run_id, envs=[])
    db.session.add_all([config, row])
    db.session.commit()
    return row


def url_of(row: InstalledSkill, what: str = "install-events") -> str:
    return f"{CONFIGS}/{row.sandbox_config_id}/skills/{row.id}/{what}"


_OPEN: list[Stream] = []


@dataclass
class Stream:
    """Frames of one SSE response as they arrive, each with its arrival time."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    frames: list[dict] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)  # set: the client hangs up
    body: bytes = b""
    response: httpx.Response | None = None

    def hang_up(self) -> None:
        """Close the connection now (a reader blocked between frames wakes at once)."""
        self.stop.set()
        if self.response is not None:
            self.response.close()

    def wait_frames(self, count: int, seconds: float = 10) -> list[dict]:
        deadline = time.monotonic() + seconds
        while len(self.frames) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.frames


def read_stream(base: str, path: str, headers: dict[str, str], limit: float = 30) -> Stream:
    """Open `path` in a thread and collect what it sends until it ends (or `limit`)."""
    out = Stream()

    def pump() -> None:
        try:
            with httpx.stream("GET", base + path, headers=headers, timeout=limit) as response:
                out.response = response
                out.status, out.headers = response.status_code, dict(response.headers)
                out.opened.set()
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    for line in response.iter_lines():
                        if out.stop.is_set():
                            break
                        if line.startswith("data: "):
                            out.frames.append(json.loads(line[6:]))
                            out.arrived.append(time.monotonic())
                        elif line.startswith(":"):
                            out.comments.append(line)
                else:
                    out.body = response.read()
        except Exception:  # closed by hang_up from another thread: expected
            if not out.stop.is_set():
                raise
        finally:
            out.opened.set()
            out.ended.set()

    _OPEN.append(out)
    threading.Thread(target=pump, daemon=True).start()
    assert out.opened.wait(limit), "the stream never answered"
    return out


@pytest.fixture(autouse=True)
def _hang_up_streams() -> Iterator[None]:
    """Every stream a test opened is closed at its end, so no server thread keeps following
    a run into the next test (a keep-alive every few seconds would keep it open for an
    hour); the server notices at its next write and releases the stream's slot."""
    yield
    while _OPEN:
        stream = _OPEN.pop()
        stream.hang_up()
        assert stream.ended.wait(5), "a test stream did not close"
