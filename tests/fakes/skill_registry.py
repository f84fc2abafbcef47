"""Fake skill registries and code hosts on loopback: ClawHub-style registries, GitHub
(pages, codeload, API), GitLab and SkillHub, each a real HTTP server on 127.0.0.1 serving
real archives the test built. Every server counts the connections it accepted, so a test
can prove that a refused source was refused before anything connected.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/octet-stream"
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    delay: float = 0.0


class FakeSite:
    """One HTTP server; routes are exact `path?query` (or bare path) -> Reply."""

    def __init__(self) -> None:
        self.routes: dict[str, Reply] = {}
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                site.requests.append({"path": self.path, "headers": dict(self.headers)})
                reply = site.routes.get(self.path) or site.routes.get(urlsplit(self.path).path)
                reply = reply or Reply(404, b'{"message":"not found"}', "application/json")
                time.sleep(reply.delay)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(reply.body), 65536):
                        piece = reply.body[start:start + 65536]
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, *args) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def process_request(self, request, client_address) -> None:
                site.connections += 1
                super().process_request(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def add(self, path: str, body: bytes = b"", content_type: str = "application/zip",
            **kwargs: Any) -> str:
        self.routes[path] = Reply(body=body, content_type=content_type, **kwargs)
        return self.url + path

    def add_json(self, path: str, data: Any, status: int = 200) -> str:
        self.routes[path] = Reply(status, json.dumps(data).encode(), "application/json")
        return self.url + path

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        self.routes[path] = Reply(status, b"", "text/plain", {"Location": location})
        return self.url + path

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Sites:
    clawhub: FakeSite
    github: FakeSite
    codeload: FakeSite
    github_api: FakeSite
    gitlab: FakeSite
    skillhub: FakeSite
    skillhub_api: FakeSite
    skills_sh: FakeSite
    other: FakeSite  # a self-hosted registry or a plain file host

    def all(self) -> list[FakeSite]:
        return [getattr(self, name) for name in self.__dataclass_fields__]

    def settings(self) -> dict[str, Any]:
        return {"CLAWHUB_URL": self.clawhub.url, "GITHUB_URL": self.github.url,
                "GITHUB_CODELOAD_URL": self.codeload.url, "GITHUB_API_URL": self.github_api.url,
                "GITLAB_URL": self.gitlab.url, "SKILLHUB_URL": self.skillhub.url,
                "SKILLHUB_API_URL": self.skillhub_api.url, "SKILLS_SH_URL": self.skills_sh.url,
                "SKILL_SOURCES_ALLOW_PRIVATE": True}


@pytest.fixture
def sites(app, monkeypatch) -> Iterator[Sites]:
    """Every registry on its own loopback server, and the app's settings pointed at them
    (with the SSRF guard lifted, as only tests may)."""
    made = Sites(*(FakeSite() for _ in Sites.__dataclass_fields__))
    for key, value in made.settings().items():
        monkeypatch.setitem(app.config, key, value)
    yield made
    for site in made.all():
        site.stop()


@pytest.fixture
def bundle_dir(app, tmp_path, monkeypatch):
    """A fresh blob directory for this test, so it can see exactly what was stored."""
    directory = tmp_path / "bundles"
    monkeypatch.setitem(app.config, "SKILL_BUNDLE_DIR", str(directory))
    monkeypatch.setitem(app.config, "SKILL_BUNDLE_STORE", "")
    return directory


def stored_blobs(directory) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
