"""Sandlot's exec agent: runs inside a Docker sandbox as the sandbox user and spawns the
host's commands without a round trip through the engine's API (issue 29).

Started by the host with one detached `docker exec` (as the sandbox user, never root),
from this file, bind-mounted read-only. Standard library only; the image's python3.

It listens on a unix socket in /run/sandlot (a per-sandbox host directory) and serves
only peers outside the sandbox's pid namespace (SO_PEERCRED reports pid 0 for them):
a process in the sandbox, even one of the same user, is refused, so it cannot start
processes that would look like the host's runs. The agent is not dumpable (no ptrace,
no /proc/<pid>/mem or environ for the sandbox user).

Protocol (one run per connection):
- request: a 4-byte big-endian length, then JSON {"argv": [...], "env": {...},
  "cwd": "..."}; at most 4 MiB.
- answer: frames in Docker's exec stream format (a byte stream id, 3 zero bytes, a
  4-byte big-endian length, the payload): 4 = the child's pid and start ticks ("pid
  ticks", once, before any output; or an error text when nothing was started), 1 =
  stdout, 2 = stderr, 3 = the exit code as decimal text (last frame).

The host treats all of it as untrusted; containment never depends on this process.
"""

import ctypes
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

SOCKET = "/run/sandlot/agent.sock"
MAX_REQUEST = 4 << 20
HEADER = struct.Struct(">BxxxL")
PR_SET_DUMPABLE = 4
POLL_SEC = 0.05  # how soon an exited child is noticed while its pipes stay open
DRAIN_SEC = 0.2  # how long output is still read after the child exited


def _frame(conn, kind, payload):
    conn.sendall(HEADER.pack(kind, len(payload)) + payload)


def _read_exact(conn, size):
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("short request")
        data += chunk
    return bytes(data)


def _start_ticks(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[19])


def _serve(conn):
    conn.settimeout(10)
    (size,) = struct.unpack(">L", _read_exact(conn, 4))
    if size > MAX_REQUEST:
        raise ValueError("request too large")
    request = json.loads(_read_exact(conn, size))
    conn.settimeout(None)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
    try:
        child = subprocess.Popen(
            [str(a) for a in request["argv"]], cwd=request.get("cwd") or None, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, close_fds=True)
    except OSError as exc:  # nothing ran: the host runs it through the engine instead
        _frame(conn, 4, f"error {exc.strerror or exc}".encode())
        return
    try:
        _frame(conn, 4, f"{child.pid} {_start_ticks(child.pid)}".encode())
    except OSError:
        pass
    _pump(conn, child)


def _pump(conn, child):
    """Output as it comes until both pipes close, or the child has exited and what
    it wrote is read (as the engine does, a background process holding the pipes
    does not hold the run open). When the host has gone, keep draining (the child
    must not die of a broken pipe because of us) and just stop sending."""
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ, 1)
    selector.register(child.stderr, selectors.EVENT_READ, 2)
    host_gone = False
    open_streams = 2
    drain_until = None
    while open_streams:
        now = time.monotonic()
        if drain_until is None and child.poll() is not None:
            drain_until = now + DRAIN_SEC
        if drain_until is not None and now >= drain_until:
            break
        events = selector.select(POLL_SEC if drain_until is None else drain_until - now)
        if not events and drain_until is not None:
            break  # exited, and nothing more came at once
        for key, _ in events:
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            if not host_gone:
                try:
                    _frame(conn, key.data, chunk)
                except OSError:
                    host_gone = True
    selector.close()
    child.stdout.close()
    child.stderr.close()
    code = child.wait()
    code = code if code >= 0 else 128 - code  # killed by a signal: as a shell says it
    if not host_gone:
        try:
            _frame(conn, 3, str(code).encode())
        except OSError:
            pass


def _handle(conn):
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, _, _ = struct.unpack("3i", creds)
        if pid != 0:  # a process of this sandbox: only the host may ask
            return
        _serve(conn)
    except Exception:  # noqa: BLE001 - one bad connection never ends the agent
        pass
    finally:
        conn.close()


def main():
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        os.unlink(SOCKET)
    except FileNotFoundError:
        pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    server.bind(SOCKET)
    os.umask(old)
    server.listen(64)
    sys.stdout.close()
    while True:  # a full process table (a fork bomb) must not end the agent
        try:
            conn, _ = server.accept()
        except OSError:
            time.sleep(0.05)
            continue
        try:
            threading.Thread(target=_handle, args=(conn,), daemon=True).start()
        except RuntimeError:  # no thread to be had: the host falls back to the engine
            conn.close()


if __name__ == "__main__":
    main()
