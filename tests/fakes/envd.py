"""The envd half of the fake E2B server: envd's Connect-RPC process and filesystem
services and its /files HTTP API, over a real Docker container per sandbox.

The RPC services are the SDK's own generated server stubs (`ProcessWSGIApplication`,
`FilesystemWSGIApplication` from `e2b.envd.*_connect`, messages from `*_pb`), so the
wire (Connect over HTTP/1.1, JSON or proto, envelope-framed server streams) is
whatever the SDK's connectrpc speaks. Behind them every command really runs: `docker
exec` in the sandbox's container, as the requested user, streamed back as envd
streams it; a PTY (the SDK's `pty.create`) is a `docker exec` on a real
pseudo-terminal, typed into through its hijacked connection and resized by the
engine. Like envd, file operations act as root and chown to the requesting user
(envd's EnsureDirs/chown): they do not enforce that user's rights.
"""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import signal
import socket
import tarfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.filesystem import filesystem_pb
from e2b.envd.filesystem.filesystem_connect import FilesystemWSGIApplication
from e2b.envd.process import process_pb
from e2b.envd.process.process_connect import ProcessWSGIApplication
from protobuf import Oneof
from werkzeug.formparser import parse_form_data
from werkzeug.wrappers import Request, Response
from werkzeug.wsgi import LimitedStream

if TYPE_CHECKING:
    from tests.fakes.e2b_server import FakeSandbox

DEFAULT_USER = "sandbox"  # the template's default user (the image's uid 1000)
Event = process_pb.ProcessEvent

# Root-side helper run in the container for stat/list/ensure-dirs: prints one JSON line.
FS_HELPER = r"""
import grp, json, os, pwd, stat, sys
op, path = sys.argv[1], sys.argv[2]
def entry(p):
    st = os.lstat(p)
    link = stat.S_ISLNK(st.st_mode)
    try:
        target = os.stat(p)
    except OSError:
        target = st
    kind = "dir" if stat.S_ISDIR(target.st_mode) else "file"
    def name_of(table, ident):
        try:
            return table(ident)[0]
        except KeyError:
            return str(ident)
    out = {"name": os.path.basename(p) or p, "path": p, "type": kind, "size": target.st_size,
           "mode": stat.S_IMODE(target.st_mode), "permissions": stat.filemode(target.st_mode),
           "owner": name_of(pwd.getpwuid, st.st_uid), "group": name_of(grp.getgrgid, st.st_gid),
           "mtime": int(target.st_mtime), "is_symlink": link}
    if link:
        out["symlink_target"] = os.readlink(p)
    return out
try:
    if op == "user":
        u = pwd.getpwnam(path)
        print(json.dumps({"uid": u.pw_uid, "gid": u.pw_gid, "home": u.pw_dir}))
    elif op == "stat":
        print(json.dumps(entry(path)))
    elif op == "list":
        if not os.path.isdir(path):
            print(json.dumps({"error": "not_dir"})); sys.exit(0)
        print(json.dumps([entry(os.path.join(path, n)) for n in sorted(os.listdir(path))]))
    elif op == "ensure":
        uid, gid = int(sys.argv[3]), int(sys.argv[4])
        parts, cur = [p for p in path.split("/") if p], "/"
        for part in parts:
            cur = os.path.join(cur, part)
            if not os.path.exists(cur):
                os.mkdir(cur, 0o755)
                os.chown(cur, uid, gid)
            elif not os.path.isdir(cur):
                print(json.dumps({"error": "not_dir", "path": cur})); sys.exit(0)
        print(json.dumps({"ok": True}))
    elif op == "chown":
        os.chown(path, int(sys.argv[3]), int(sys.argv[4]))
        print(json.dumps({"ok": True}))
except KeyError:
    print(json.dumps({"error": "no_user"}))
except FileNotFoundError:
    print(json.dumps({"error": "not_found"}))
except NotADirectoryError:
    print(json.dumps({"error": "not_found"}))
"""


def _descendants(pid: int) -> list[int]:
    """pid and every process below it, from /proc (host pid namespace)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        ppid = int(raw[raw.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, ()))
    return out


@dataclass
class Proc:
    pid: int
    exec_id: str
    host_pid: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    tty: socket.socket | None = None  # a PTY's stdin and output, raw (Docker's tty mode)
    typing: threading.Lock = field(default_factory=threading.Lock)  # one input at a time


class Container:
    """Docker operations on one sandbox's container."""

    def __init__(self, api: Any, container_id: str):
        self.api = api
        self.id = container_id
        self.procs: dict[int, Proc] = {}
        self._users: dict[str, dict[str, Any]] = {}
        self._next_pid = 100
        self._lock = threading.Lock()

    def run(self, argv: list[str], user: str = "root", workdir: str = "/",
            env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
        exec_id = self.api.exec_create(self.id, argv, user=user, workdir=workdir,
                                       environment=env or {})["Id"]
        out, err = self.api.exec_start(exec_id, demux=True)
        code = self.api.exec_inspect(exec_id).get("ExitCode")
        return (code if code is not None else -1), out or b"", err or b""

    def helper(self, op: str, *args: str) -> Any:
        code, out, err = self.run(["python3", "-c", FS_HELPER, op, *args])
        if code != 0:
            raise ConnectError(Code.INTERNAL, (err or out).decode("utf-8", "replace")[-300:])
        return json.loads(out.decode("utf-8").strip().splitlines()[-1])

    def user(self, name: str) -> dict[str, Any]:
        """uid, gid and home of a user of the image (looked up once per container)."""
        if name not in self._users:
            found = self.helper("user", name)
            if "error" in found:
                raise ConnectError(Code.INVALID_ARGUMENT, f"user '{name}' not found")
            self._users[name] = found
        return self._users[name]

    def spawn(self, argv: list[str], user: str, workdir: str, env: dict[str, str]):
        exec_id = self.api.exec_create(self.id, argv, user=user, workdir=workdir,
                                       environment=env, stdout=True, stderr=True)["Id"]
        stream = self.api.exec_start(exec_id, stream=True, demux=True)
        return self._started(exec_id), stream

    def spawn_pty(self, argv: list[str], user: str, workdir: str, env: dict[str, str],
                  cols: int, rows: int) -> Proc:
        """`argv` on a pseudo-terminal of `cols` x `rows`: `proc.tty` carries the
        keystrokes in and the terminal's output out."""
        exec_id = self.api.exec_create(self.id, argv, user=user, workdir=workdir,
                                       environment=env, stdin=True, tty=True)["Id"]
        raw = self.api.exec_start(exec_id, tty=True, socket=True)
        proc = self._started(exec_id)
        proc.tty = raw._sock  # the SocketIO's socket: sendall/recv, no buffering
        self.resize(proc, cols, rows)
        return proc

    def _started(self, exec_id: str) -> Proc:
        with self._lock:
            self._next_pid += 1
            proc = Proc(pid=self._next_pid, exec_id=exec_id)
            self.procs[proc.pid] = proc
        for _ in range(100):
            proc.host_pid = self.api.exec_inspect(exec_id).get("Pid") or 0
            if proc.host_pid:
                break
            time.sleep(0.01)
        return proc

    def resize(self, proc: Proc, cols: int, rows: int) -> None:
        self.api.exec_resize(proc.exec_id, height=rows, width=cols)

    def kill(self, pid: int) -> bool:
        proc = self.procs.get(pid)
        if proc is None or proc.done.is_set() or not proc.host_pid:
            return False
        # envd kills the group. Freeze it first: killing a child while its shell still
        # runs let the shell go on to its next command (`sleep 60; echo never` printed
        # "never" under load).
        targets = _descendants(proc.host_pid)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for target in targets:
                try:
                    os.kill(target, sig)
                except ProcessLookupError:
                    pass
        return True

    def exit_code(self, proc: Proc) -> int:
        for _ in range(200):
            info = self.api.exec_inspect(proc.exec_id)
            if not info.get("Running"):
                return info.get("ExitCode") if info.get("ExitCode") is not None else -1
            time.sleep(0.01)
        return -1


def _ctx_user(ctx: Any) -> str:
    header = ctx.request_headers.get("authorization") or ""
    return _basic_user(header) or DEFAULT_USER


def _basic_user(header: str) -> str:
    if not header.lower().startswith("basic "):
        return ""
    try:
        return base64.b64decode(header[6:]).decode("utf-8").split(":", 1)[0]
    except ValueError:
        return ""


def _resolve(path: str, home: str) -> str:
    return posixpath.normpath(posixpath.join(home, path or "."))


class ProcessService:
    """envd's process.Process: Start streams a real `docker exec` (on a pseudo-terminal
    when asked: the SDK's `pty.create`), SendInput types into a PTY, Update resizes
    it, SendSignal kills."""

    def __init__(self, current):
        self.current = current

    def start(self, request, ctx):
        sandbox: FakeSandbox = self.current()
        config = request.process
        user = _ctx_user(ctx)
        home = sandbox.container.user(user)["home"]
        cwd = config.cwd if config.has_field("cwd") and config.cwd else home
        argv = [config.cmd, *config.args]
        envs = dict(config.envs)
        try:
            if request.has_field("pty"):
                size = request.pty.size or process_pb.PTY.Size(cols=80, rows=24)
                proc = sandbox.container.spawn_pty(argv, user, cwd, envs, size.cols,
                                                   size.rows)
                chunks, close = _tty_chunks(proc.tty), proc.tty.close
            else:
                proc, stream = sandbox.container.spawn(argv, user, cwd, envs)
                chunks, close = _demuxed(stream), stream.close
        except Exception as exc:  # noqa: BLE001 - the engine's refusal is envd's error
            raise ConnectError(Code.INVALID_ARGUMENT, f"error starting process: {exc}") from exc
        sandbox.record_process(user, argv, cwd, envs)

        def events():
            try:
                yield process_pb.StartResponse(event=Event(
                    event=Oneof("start", Event.StartEvent(pid=proc.pid))))
                for name, chunk in chunks:
                    yield process_pb.StartResponse(event=Event(event=Oneof(
                        "data", Event.DataEvent(output=Oneof(name, chunk)))))
                code = sandbox.container.exit_code(proc)
                yield process_pb.StartResponse(event=Event(event=Oneof(
                    "end", Event.EndEvent(exit_code=code, exited=True,
                                          status=f"exit status {code}"))))
            finally:
                proc.done.set()
                close()

        return events()

    def send_input(self, request, ctx):
        proc = self._running(request.process)
        data = request.input.input if request.input else None
        if data is None or data.field != "pty" or proc.tty is None:
            raise ConnectError(Code.UNIMPLEMENTED, "the fake envd takes input for PTYs only")
        with proc.typing:
            proc.tty.sendall(data.value)
        return process_pb.SendInputResponse()

    def update(self, request, ctx):
        proc = self._running(request.process)
        if request.has_field("pty") and request.pty.size:
            if proc.tty is None:
                raise ConnectError(Code.FAILED_PRECONDITION, "the process has no PTY")
            self.current().container.resize(proc, request.pty.size.cols,
                                             request.pty.size.rows)
        return process_pb.UpdateResponse()

    def send_signal(self, request, ctx):
        pid = _pid(request.process)
        if not self.current().container.kill(pid):
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        return process_pb.SendSignalResponse()

    def _running(self, selector: Any) -> Proc:
        pid = _pid(selector)
        proc = self.current().container.procs.get(pid)
        if proc is None or proc.done.is_set():
            raise ConnectError(Code.NOT_FOUND, f"process with pid {pid} not found")
        return proc

    def _unimplemented(self, *args, **kwargs):
        raise ConnectError(Code.UNIMPLEMENTED, "not implemented by the fake envd")

    list = connect = stream_input = close_stdin = _unimplemented


def _pid(process: Any) -> int:
    selector = process.selector if process else None
    if selector is None or selector.field != "pid":
        raise ConnectError(Code.INVALID_ARGUMENT, "select the process by pid")
    return selector.value


def _demuxed(stream: Any):
    for out, err in stream:
        if out:
            yield "stdout", out
        if err:
            yield "stderr", err


def _tty_chunks(tty: socket.socket):
    """A PTY's output as it comes (Docker's tty mode is a raw stream, not multiplexed)."""
    while chunk := tty.recv(32768):
        yield "pty", chunk


def _entry(found: dict[str, Any]) -> filesystem_pb.EntryInfo:
    kind = (filesystem_pb.FileType.DIRECTORY if found["type"] == "dir"
            else filesystem_pb.FileType.FILE)
    entry = filesystem_pb.EntryInfo(
        name=found["name"], type=kind, path=found["path"], size=found["size"],
        mode=found["mode"], permissions=found["permissions"], owner=found["owner"],
        group=found["group"], is_symlink=found["is_symlink"])
    if "symlink_target" in found:
        entry.symlink_target = found["symlink_target"]
    return entry


class FilesystemService:
    """envd's filesystem.Filesystem over the container (as root, like envd)."""

    def __init__(self, current):
        self.current = current

    def _path(self, sandbox: FakeSandbox, ctx: Any, path: str) -> str:
        return _resolve(path, sandbox.container.user(_ctx_user(ctx))["home"])

    def stat(self, request, ctx):
        sandbox = self.current()
        found = sandbox.container.helper("stat", self._path(sandbox, ctx, request.path))
        if "error" in found:
            raise ConnectError(Code.NOT_FOUND, f"path not found: {request.path}")
        return filesystem_pb.StatResponse(entry=_entry(found))

    def list_dir(self, request, ctx):
        sandbox = self.current()
        path = self._path(sandbox, ctx, request.path)
        found = sandbox.container.helper("list", path)
        if isinstance(found, dict) and found.get("error") == "not_found":
            raise ConnectError(Code.NOT_FOUND, f"path not found: {path}")
        if isinstance(found, dict):
            raise ConnectError(Code.INVALID_ARGUMENT, f"path is not a directory: {path}")
        return filesystem_pb.ListDirResponse(entries=[_entry(f) for f in found])

    def make_dir(self, request, ctx):
        sandbox = self.current()
        user = sandbox.container.user(_ctx_user(ctx))
        path = _resolve(request.path, user["home"])
        if "error" not in sandbox.container.helper("stat", path):
            raise ConnectError(Code.ALREADY_EXISTS, f"directory already exists: {path}")
        sandbox.container.helper("ensure", path, str(user["uid"]), str(user["gid"]))
        return filesystem_pb.MakeDirResponse(
            entry=_entry(sandbox.container.helper("stat", path)))

    def remove(self, request, ctx):
        sandbox = self.current()
        sandbox.container.run(["rm", "-rf", "--", self._path(sandbox, ctx, request.path)])
        return filesystem_pb.RemoveResponse()

    def _unimplemented(self, *args, **kwargs):
        raise ConnectError(Code.UNIMPLEMENTED, "not implemented by the fake envd")

    move = watch_dir = create_watcher = get_watcher_events = remove_watcher = _unimplemented


def _json(status: int, message: str) -> Response:
    return Response(json.dumps({"code": status, "message": message}), status=status,
                    mimetype="application/json")


def _tar(name: str, data: bytes, uid: int, gid: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        info.uid, info.gid = uid, gid
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def files_api(sandbox: FakeSandbox, request: Request) -> Response:
    """envd's GET/POST /files (download, multipart or octet-stream upload)."""
    container = sandbox.container
    username = request.args.get("username") or _basic_user(
        request.headers.get("Authorization", "")) or DEFAULT_USER
    try:
        user = container.user(username)
    except ConnectError as exc:
        return _json(400, exc.message)
    path = _resolve(request.args.get("path", ""), user["home"])
    if request.method == "GET":
        found = container.helper("stat", path)
        if "error" in found:
            return _json(404, f"path not found: {path}")
        if found["type"] == "dir":
            return _json(400, f"path is a directory: {path}")
        code, out, err = container.run(["cat", "--", path])
        if code != 0:
            return _json(500, err.decode("utf-8", "replace"))
        return Response(out, mimetype="application/octet-stream")
    if request.method != "POST":
        return _json(405, "method not allowed")
    if request.mimetype == "multipart/form-data":
        _, _, uploads = parse_form_data(request.environ)
        items = [(request.args.get("path") or part.filename, part.read())
                 for part in uploads.values()]
    else:
        items = [(request.args.get("path", ""), request.get_data())]
    written = []
    for raw_path, data in items:
        target = _resolve(raw_path, user["home"])
        parent, name = posixpath.split(target)
        ensured = container.helper("ensure", parent, str(user["uid"]), str(user["gid"]))
        if "error" in ensured:
            return _json(400, f"path is not a directory: {ensured.get('path')}")
        found = container.helper("stat", target)
        if "error" not in found and found["type"] == "dir":
            return _json(400, f"path is a directory: {target}")
        container.api.put_archive(container.id, parent, _tar(name, data, user["uid"],
                                                             user["gid"]))
        written.append({"name": name, "type": "file", "path": target})
    return Response(json.dumps(written), mimetype="application/json")


class Envd:
    """The envd endpoints of all sandboxes; `current()` is the request's sandbox."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.process = ProcessWSGIApplication(ProcessService(self.current))
        self.filesystem = FilesystemWSGIApplication(FilesystemService(self.current))

    def current(self) -> FakeSandbox:
        return self._local.sandbox

    def __call__(self, sandbox: FakeSandbox, environ, start_response):
        self._local.sandbox = sandbox
        if environ.get("CONTENT_LENGTH") and not environ.get("wsgi.input_terminated"):
            # The dev server hands over the raw connection: connectrpc drains the body
            # after an error answer and would wait for the client to hang up.
            environ["wsgi.input"] = LimitedStream(environ["wsgi.input"],
                                                  int(environ["CONTENT_LENGTH"]))
        path = environ.get("PATH_INFO", "")
        if path.startswith(self.process.path + "/"):
            return self.process(environ, start_response)
        if path.startswith(self.filesystem.path + "/"):
            return self.filesystem(environ, start_response)
        request = Request(environ)
        if path == "/files":
            return files_api(sandbox, request)(environ, start_response)
        if path == "/health":
            return Response(status=204)(environ, start_response)
        return _json(404, f"no envd route {path}")(environ, start_response)
