"""A local E2B-compatible server that the real `e2b` SDK talks to over HTTP on 127.0.0.1.

Two listeners, both plain HTTP on loopback:

- the control plane (`api_url`): the REST routes the SDK and our backends call --
  create (`POST /v2/sandboxes`, and Cube's `POST /sandboxes`), list with metadata and
  state filters and `x-next-token` paging (`GET /v2/sandboxes`), detail, kill, pause,
  connect/resume (`/v2/sandboxes/{id}/connect` and `/sandboxes/{id}/connect`),
  timeout, snapshots, templates. Every request is recorded (`calls`, `creates`) so
  tests can assert exactly what a backend sent; `fail_next` makes the next matching
  request answer an error.
- the data-plane gateway (`gateway_url`, the config's `proxy_url`): routes by the
  `Host: 49983-<sandbox id>.<domain>` authority as CubeProxy does, checks envd's
  `X-Access-Token` (and, for Cube, the traffic token), and serves envd (envd.py).

Each sandbox is a real container of the sandbox image on the local Docker engine, with
no network at all (`network_mode=none`): commands really run, as real users, with
real permissions; pause is `docker pause`; snapshots are `docker commit` images that
boot as templates. TTL expiry follows the lifecycle sent at create (pause or kill),
and auto-resume wakes a paused sandbox when envd traffic arrives.

Flavours: `e2b` (the cloud API) and `cube` (CubeAPI: no /v2 create or connect, a
traffic token required on the data plane, Cube's template catalog shape).
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote

import docker
from werkzeug.datastructures import Headers
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from tests.fakes.envd import Container, Envd

ENVD_VERSION = "0.6.4"
ENVD_PORT = 49983
LABEL = "sandlot_fake_e2b"  # on every container and image the fake creates
HOST = re.compile(r"^(\d+)-([A-Za-z0-9_-]+)\.(.+)$")


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@dataclass
class Call:
    """One recorded request."""

    plane: str  # "api" or "envd"
    method: str
    path: str
    query: dict[str, str]
    headers: Headers  # case-insensitive
    body: Any


@dataclass
class FakeSandbox:
    id: str
    template: str
    container: Container
    metadata: dict[str, str]
    envs: dict[str, str]
    timeout: int
    auto_pause: bool
    auto_resume: bool
    envd_token: str
    traffic_token: str
    public_traffic: bool
    state: str = "running"
    started_at: datetime = field(default_factory=_now)
    end_at: datetime = field(default_factory=_now)
    processes: list[dict[str, Any]] = field(default_factory=list)

    def record_process(self, user: str, argv: list[str], cwd: str,
                       envs: dict[str, str]) -> None:
        self.processes.append({"user": user, "argv": argv, "cwd": cwd, "envs": envs})

    def refresh(self, seconds: int | None = None) -> None:
        self.timeout = seconds if seconds is not None else self.timeout
        self.end_at = _now() + timedelta(seconds=self.timeout)


class FakeE2BServer:
    """Start with `start()`, point a backend at `settings()`, `stop()` removes everything."""

    def __init__(self, flavor: str = "e2b", *, image: str, docker_host: str,
                 api_key: str = "fake-api-key-7f3c91", domain: str | None = None,
                 template_id: str = "sandlot-base", run_id: str | None = None):
        if flavor not in ("e2b", "cube"):
            raise ValueError(flavor)
        self.flavor = flavor
        self.api_key = api_key
        self.domain = domain or f"{flavor}.test"
        self.template_id = template_id
        self.run_id = run_id or uuid.uuid4().hex[:10]
        self.docker = docker.APIClient(base_url=docker_host, version="auto", timeout=60)
        self.templates: dict[str, dict[str, Any]] = {
            template_id: {"image": image, "names": [template_id], "snapshot": False}}
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.calls: list[Call] = []
        self.envd = Envd()
        self._failures: list[tuple[str, str, int, str]] = []
        # Template builds: how long one takes, and base images whose build fails.
        self.build_seconds = 0.0
        self.failing_images: set[str] = set()
        self._lock = threading.RLock()
        self._servers: list[Any] = []

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeE2BServer:
        for app in (self._api_app, self._gateway_app):
            server = make_server("127.0.0.1", 0, app, threaded=True,
                                 request_handler=_QuietHandler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        return self

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_port}"

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_port}"

    def settings(self, **overrides: Any) -> dict[str, Any]:
        """A config block for this server (loopback, so private endpoints are allowed)."""
        ttl_key = "cube_sandbox_ttl_seconds" if self.flavor == "cube" else (
            "e2b_sandbox_ttl_seconds")
        return {"api_key": self.api_key, "template_id": self.template_id,
                "api_url": self.api_url, "proxy_url": self.gateway_url,
                "sandbox_domain": self.domain, "http_timeout_sec": 30, ttl_key: 600,
                "allow_private_endpoints": True, **overrides}

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
        self._servers.clear()
        for row in self.docker.containers(all=True, filters={"label": f"{LABEL}={self.run_id}"}):
            self.docker.remove_container(row["Id"], force=True, v=True)
        for template in self.templates.values():
            if template["snapshot"]:
                try:
                    self.docker.remove_image(template["image"], force=True)
                except docker.errors.NotFound:
                    pass
        self.docker.close()

    # -- test hooks -----------------------------------------------------------------------

    @property
    def creates(self) -> list[Call]:
        return [c for c in self.calls if c.plane == "api" and c.method == "POST"
                and c.path in ("/sandboxes", "/v2/sandboxes")]

    def api_calls(self, method: str | None = None, path: str = "") -> list[Call]:
        return [c for c in self.calls if c.plane == "api" and (method is None or
                c.method == method) and c.path.startswith(path)]

    def envd_calls(self) -> list[Call]:
        return [c for c in self.calls if c.plane == "envd"]

    def fail_next(self, status: int, message: str = "injected failure", *,
                  method: str = "", path: str = "", times: int = 1) -> None:
        """The next `times` API requests matching method/path prefix answer `status`
        (the SDK retries 429 and 5xx answers itself, 3 times by default)."""
        self._failures.extend([(method, path, status, message)] * times)

    def clear_failures(self) -> None:
        self._failures.clear()

    def expire(self, sandbox_id: str) -> None:
        """Make a sandbox's TTL run out now (the lifecycle decides what happens)."""
        self.sandboxes[sandbox_id].end_at = _now() - timedelta(seconds=1)

    # -- plumbing -------------------------------------------------------------------------

    def _record(self, plane: str, request: Request) -> Call:
        body: Any = None
        if plane == "api" and request.get_data():
            try:
                body = json.loads(request.get_data())
            except ValueError:
                body = request.get_data()
        call = Call(plane, request.method, request.path, dict(request.args.items()),
                    Headers(request.headers.items()), body)
        with self._lock:
            self.calls.append(call)
        return call

    @staticmethod
    def _error(status: int, message: str) -> Response:
        return Response(json.dumps({"code": status, "message": message}), status=status,
                        mimetype="application/json")

    @staticmethod
    def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return Response(json.dumps(body), status=status, mimetype="application/json",
                        headers=headers)

    def _expire(self) -> None:
        now = _now()
        for sandbox in list(self.sandboxes.values()):
            if sandbox.state == "running" and sandbox.end_at <= now:
                if sandbox.auto_pause:
                    self._pause(sandbox)
                else:
                    self._kill(sandbox)

    def _pause(self, sandbox: FakeSandbox) -> None:
        self.docker.pause(sandbox.container.id)
        sandbox.state = "paused"

    def _resume(self, sandbox: FakeSandbox) -> None:
        self.docker.unpause(sandbox.container.id)
        sandbox.state = "running"
        sandbox.refresh()

    def _kill(self, sandbox: FakeSandbox) -> None:
        self.docker.remove_container(sandbox.container.id, force=True, v=True)
        self.sandboxes.pop(sandbox.id, None)

    # -- control plane --------------------------------------------------------------------

    def _api_app(self, environ, start_response):
        request = Request(environ)
        call = self._record("api", request)
        with self._lock:
            response = self._api(request, call)
        return response(environ, start_response)

    def _api(self, request: Request, call: Call) -> Response:
        for index, (method, path, status, message) in enumerate(self._failures):
            if (not method or method == request.method) and request.path.startswith(path):
                del self._failures[index]
                return self._error(status, message)
        if request.headers.get("X-API-Key") != self.api_key:
            return self._error(401, "Invalid API key")
        self._expire()
        route = f"{request.method} {request.path}"
        v2 = self.flavor == "e2b"
        if route == "POST /sandboxes" or (v2 and route == "POST /v2/sandboxes"):
            return self._create(call.body or {})
        if route == "GET /v2/sandboxes":
            return self._list(request)
        if route == "GET /templates":
            return self._templates()
        if route == "POST /v3/templates":
            return self._request_build(call.body or {})
        match = re.fullmatch(r"/v2/templates/([^/]+)/builds/([^/]+)", request.path)
        if match and request.method == "POST":
            return self._start_build(unquote(match[1]), match[2], call.body or {})
        match = re.fullmatch(r"/templates/([^/]+)/builds/([^/]+)/status", request.path)
        if match and request.method == "GET":
            return self._build_status(unquote(match[1]), match[2])
        match = re.fullmatch(r"/templates/([^/]+)/tags", request.path)
        if match and request.method == "GET":
            return self._tags(unquote(match[1]))
        if route == "GET /snapshots":
            return self._snapshots(request)
        if route == "GET /health" and self.flavor == "cube":
            return self._json({"status": "ok"})
        match = re.fullmatch(r"(?:/v2)?/sandboxes/([^/]+)(/[a-z]+)?", request.path)
        if match and (v2 or not request.path.startswith("/v2/")):
            return self._sandbox_route(request, unquote(match[1]), match[2] or "", call)
        match = re.fullmatch(r"/templates/(.+)", request.path)
        if match and request.method == "DELETE":
            return self._delete_template(unquote(match[1]))
        return self._error(404, f"no route {route}")

    def _create(self, body: dict[str, Any]) -> Response:
        template_id = body.get("templateID", "")
        template = self.templates.get(template_id)
        if template is not None and "default" not in template.get("tags", ["default"]):
            template = None  # a create resolves the `default` tag (reference 5.4)
        if template is None or self._settle(template) != "ready":
            return self._error(404, f"template '{template_id}' not found")
        lifecycle = body.get("lifecycle") or {}
        auto_pause = bool(body.get("autoPause")) or lifecycle.get("onTimeout") == "pause"
        auto_resume = bool((body.get("autoResume") or {}).get("enabled")
                           or lifecycle.get("autoResume"))
        envs = {str(k): str(v) for k, v in (body.get("envVars") or {}).items()}
        network = body.get("network") or {}
        host_config = self.docker.create_host_config(network_mode="none", init=True)
        container = self.docker.create_container(
            template["image"], command=["sleep", "infinity"], environment=envs,
            labels={LABEL: self.run_id}, host_config=host_config)
        self.docker.start(container["Id"])
        sandbox = FakeSandbox(
            id=f"i{uuid.uuid4().hex[:19]}", template=template_id,
            container=Container(self.docker, container["Id"]),
            metadata={str(k): str(v) for k, v in (body.get("metadata") or {}).items()},
            envs=envs, timeout=int(body.get("timeout") or 15), auto_pause=auto_pause,
            auto_resume=auto_resume, envd_token=secrets.token_hex(16),
            traffic_token=secrets.token_hex(16),
            public_traffic=bool(network.get("allowPublicTraffic", True)))
        sandbox.refresh()
        self.sandboxes[sandbox.id] = sandbox
        return self._json(self._created(sandbox, with_traffic=True), 201)

    def _created(self, sandbox: FakeSandbox, with_traffic: bool) -> dict[str, Any]:
        body = {"templateID": sandbox.template, "sandboxID": sandbox.id, "clientID": "fake",
                "envdVersion": ENVD_VERSION, "envdAccessToken": sandbox.envd_token,
                "domain": self.domain}
        if with_traffic:
            body["trafficAccessToken"] = sandbox.traffic_token
        return body

    def _listed(self, sandbox: FakeSandbox) -> dict[str, Any]:
        return {"templateID": sandbox.template, "sandboxID": sandbox.id, "clientID": "fake",
                "startedAt": _iso(sandbox.started_at), "endAt": _iso(sandbox.end_at),
                "cpuCount": 1, "memoryMB": 512, "diskSizeMB": 1024,
                "metadata": sandbox.metadata, "state": sandbox.state,
                "envdVersion": ENVD_VERSION}

    def _list(self, request: Request) -> Response:
        wanted = dict(parse_qsl(request.args.get("metadata", "")))
        wanted = {unquote(k): unquote(v) for k, v in wanted.items()}
        states = {s for s in request.args.get("state", "running,paused").split(",") if s}
        rows = [s for s in self.sandboxes.values() if s.state in states
                and all(s.metadata.get(k) == v for k, v in wanted.items())]
        rows.sort(key=lambda s: (s.started_at, s.id))
        start = int(request.args.get("nextToken") or 0)
        limit = int(request.args.get("limit") or 100)
        page = rows[start:start + limit]
        headers = {"x-next-token": str(start + limit)} if start + limit < len(rows) else {}
        return self._json([self._listed(s) for s in page], headers=headers)

    def _sandbox_route(self, request: Request, sandbox_id: str, action: str,
                       call: Call) -> Response:
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            return self._error(404, f"sandbox \"{sandbox_id}\" doesn't exist or you don't "
                                    "have access to it")
        route = f"{request.method} {action}"
        if route == "GET ":
            detail = self._listed(sandbox)
            detail.update(envdAccessToken=sandbox.envd_token, domain=self.domain)
            return self._json(detail)
        if route == "DELETE ":
            self._kill(sandbox)
            return Response(status=204)
        if route == "POST /pause":
            if sandbox.state == "paused":
                return self._error(409, "sandbox is already paused")
            self._pause(sandbox)
            return Response(status=204)
        if route == "POST /connect":
            timeout = (call.body or {}).get("timeout")
            status = 200
            if sandbox.state == "paused":
                self._resume(sandbox)
                status = 201
            if timeout and _now() + timedelta(seconds=int(timeout)) > sandbox.end_at:
                sandbox.refresh(int(timeout))
            # Cube never repeats the traffic token after create (reference 9.2 notes).
            return self._json(self._created(sandbox, with_traffic=self.flavor == "e2b"),
                              status)
        if route == "POST /timeout":
            sandbox.refresh(int((call.body or {}).get("timeout") or sandbox.timeout))
            return Response(status=204)
        if route == "POST /snapshots":
            return self._snapshot(sandbox, (call.body or {}).get("name"))
        return self._error(404, f"no route {request.method} {request.path}")

    def _snapshot(self, sandbox: FakeSandbox, name: str | None) -> Response:
        snapshot_id = ("snap-" if self.flavor == "cube" else "snapshot-") + uuid.uuid4().hex[:12]
        repo, tag = "sandlot-fake-e2b/snapshot", f"{self.run_id}-{snapshot_id}"
        self.docker.commit(sandbox.container.id, repository=repo, tag=tag, pause=True,
                           conf={"Labels": {LABEL: self.run_id}})
        names = [name] if name else [snapshot_id]
        self.templates[snapshot_id] = {"image": f"{repo}:{tag}", "names": names,
                                       "snapshot": True, "origin": sandbox.id}
        return self._json({"snapshotID": snapshot_id, "names": names}, 201)

    def _snapshots(self, request: Request) -> Response:
        origin = request.args.get("sandboxID")
        rows = [{"snapshotID": key, "names": t["names"]} for key, t in self.templates.items()
                if t["snapshot"] and (not origin or t.get("origin") == origin)]
        return self._json(rows)

    def _templates(self) -> Response:
        moment = _iso(_now())
        rows = []
        for key, template in self.templates.items():
            if template["snapshot"]:
                continue  # GET /templates keeps snapshots apart, on E2B as on Cube
            status = self._settle(template)
            created = template.get("created_at", moment)
            if self.flavor == "cube":
                rows.append({"templateID": key, "name": template["names"][0],
                             "status": status.upper(), "imageInfo": template["image"],
                             "version": template.get("build_id", "v1"),
                             "createdAt": created, "updatedAt": created,
                             "errorMessage": template.get("error", ""),
                             "instanceType": "cube.small", "networkType": "tap",
                             "allowInternetAccess": True})
            else:
                rows.append({"templateID": key, "buildID": template.get("build_id", "b1"),
                             "cpuCount": 1, "memoryMB": 512, "diskSizeMB": 1024,
                             "public": False, "aliases": [], "names": template["names"],
                             "createdAt": created, "updatedAt": created, "createdBy": None,
                             "lastSpawnedAt": None, "spawnCount": 0, "buildCount": 1,
                             "envdVersion": ENVD_VERSION, "buildStatus": status})
        return self._json(rows)

    # -- template builds (the wire of the SDK's Template.build) -----------------------------

    def _settle(self, template: dict[str, Any]) -> str:
        """A build's state now: building until its time is up, then ready or error."""
        if template.get("status", "ready") == "building" and _now() >= template["ready_at"]:
            if template["image"] in self.failing_images:
                template["status"] = "error"
                template["error"] = f"step 1: pulling {template['image']} failed: not found"
            else:
                template["status"] = "ready"
        return template.get("status", "ready")

    def _request_build(self, body: dict[str, Any]) -> Response:
        name = str(body.get("name") or "")
        if not name:
            return self._error(400, "name is required")
        existing = next((k for k, t in self.templates.items() if name in t["names"]), None)
        template_id = existing or ("tpl" + uuid.uuid4().hex[:17])
        build_id = str(uuid.uuid4())
        tags = [str(t) for t in body.get("tags") or []]
        self.templates[template_id] = {
            "image": "", "names": [name], "snapshot": False, "status": "waiting",
            "build_id": build_id, "tags": tags, "created_at": _iso(_now())}
        return self._json({"templateID": template_id, "buildID": build_id, "public": False,
                           "names": [name], "tags": tags, "aliases": []}, 202)

    def _start_build(self, template_id: str, build_id: str, body: dict[str, Any]) -> Response:
        template = self.templates.get(template_id)
        if template is None or template.get("build_id") != build_id:
            return self._error(404, f"build '{build_id}' not found")
        image = str(body.get("fromImage") or "")
        template.update(image=image, status="building",
                        ready_at=_now() + timedelta(seconds=self.build_seconds))
        try:  # the fake's "registry" is the local engine: a missing image fails the build
            self.docker.inspect_image(image)
        except docker.errors.ImageNotFound:
            self.failing_images.add(image)
        return Response(status=202)

    def _build_status(self, template_id: str, build_id: str) -> Response:
        template = self.templates.get(template_id)
        if template is None or template.get("build_id") != build_id:
            return self._error(404, f"build '{build_id}' not found")
        status = self._settle(template)
        body: dict[str, Any] = {"templateID": template_id, "buildID": build_id,
                                "status": status, "logs": [], "logEntries": []}
        if status == "error":
            body["reason"] = {"message": template["error"]}
        return self._json(body)

    def _tags(self, template_id: str) -> Response:
        template = self.templates.get(template_id)
        if template is None:
            return self._error(404, f"template '{template_id}' not found")
        # Templates the fake starts with count as built with the default tag.
        tags = template.get("tags", ["default"])
        build = template.get("build_id") or str(uuid.UUID(int=1))
        return self._json([{"tag": t, "buildID": build, "createdAt": _iso(_now())}
                           for t in tags])

    def untag(self, template_id: str) -> None:
        """Drop a template's `default` tag (the state of a build made without it)."""
        self.templates[template_id]["tags"] = [
            t for t in self.templates[template_id].get("tags", ["default"]) if t != "default"]

    def template_named(self, prefix: str) -> list[str]:
        return [k for k, t in self.templates.items() if t["names"][0].startswith(prefix)]

    def _delete_template(self, template_id: str) -> Response:
        template = self.templates.get(template_id)
        if template is None:
            return self._error(404, f"template '{template_id}' not found")
        del self.templates[template_id]
        if template["snapshot"]:  # a built template's base image is not the fake's own
            self.docker.remove_image(template["image"], force=True)
        return Response(status=204)

    # -- data-plane gateway ---------------------------------------------------------------

    def _gateway_app(self, environ, start_response):
        request = Request(environ)
        call = self._record("envd", request)
        with self._lock:
            self._expire()
            sandbox, error = self._route(request, call)
        if error is not None:
            return error(environ, start_response)
        return self.envd(sandbox, environ, start_response)

    def _route(self, request: Request, call: Call) -> tuple[Any, Response | None]:
        match = HOST.match(request.host.split(":")[0])
        if match is None or match[3] != self.domain:
            return None, self._error(400, f"invalid Host for sandbox routing: {request.host}")
        port, sandbox_id = int(match[1]), match[2]
        sandbox = self.sandboxes.get(sandbox_id)
        if sandbox is None:
            return None, self._error(502, f"The sandbox {sandbox_id} was not found")
        if port != ENVD_PORT:
            return None, self._error(502, f"port {port} is not open in the sandbox")
        if (self.flavor == "cube" and not sandbox.public_traffic and
                request.headers.get("E2B-Traffic-Access-Token") != sandbox.traffic_token):
            return None, self._error(403, "missing or wrong traffic access token")
        if request.headers.get("X-Access-Token") != sandbox.envd_token:
            return None, self._error(401, "invalid envd access token")
        if sandbox.state == "paused":
            if not sandbox.auto_resume:
                return None, self._error(502, f"The sandbox {sandbox_id} is paused")
            self._resume(sandbox)
        return sandbox, None


def wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False
