"""The gunicorn worker `make run` serves with: gthread, but a thread only for a whole request.

gunicorn's gthread worker hands a connection to a thread as soon as its first bytes
arrive; the thread then blocks reading the rest of the request. A client that sends half
a header and stalls (slowloris) holds that thread for as long as it keeps the socket
open, so N such connections take N threads and, past `threads`, every page waits.

`HeaderBufferingWorker` reads the request head (and a small body of known length) in
the worker's event loop, where a waiting connection costs a socket and a buffer, never a
thread; only a complete head goes to a thread, with the bytes replayed into gunicorn's
own parser. A head must be complete within HEADER_TIMEOUT_SEC of its first byte, or the
connection is closed. Once a thread has a request, its socket reads and writes time out
after IO_TIMEOUT_SEC, so a body that stalls mid-way frees its thread too.
Everything else (keep-alive, request parsing, limits, graceful stop) is gunicorn's.

Why this over the alternatives (docs/benchmarks.md has the figures): gevent or eventlet
workers would monkey-patch the run pool's and job pool's threads, the Docker SDK's and
psycopg's sockets and the SSE queue waits, which this app relies on as real threads; a
buffering front server (nginx) is another system package and process for `make run`.
"""

from __future__ import annotations

import errno
import re
import selectors
import socket
import time
from collections import deque
from functools import partial

from gunicorn.workers.gthread import TConn, ThreadWorker

HEADER_TIMEOUT_SEC = 10.0  # first byte to the end of the head
IO_TIMEOUT_SEC = 30.0  # longest silence on a socket a thread is serving
BUFFER_MAX = 64 * 1024  # a head (and small body) read before any thread is used
_END = b"\r\n\r\n"
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*\r\n", re.IGNORECASE)
_HANDS_OVER = re.compile(rb"\r\n(?:transfer-encoding|expect):", re.IGNORECASE)


class _Reading:
    """A connection whose request head is still arriving (event loop only)."""

    def __init__(self, conn: TConn) -> None:
        self.conn = conn
        self.buffer = bytearray()
        self.deadline = time.monotonic() + HEADER_TIMEOUT_SEC

    def complete(self) -> bool | None:
        """True when a thread can serve it without waiting, None when it never will."""
        end = self.buffer.find(_END)
        if end < 0:
            return None if len(self.buffer) >= BUFFER_MAX else False
        head = bytes(self.buffer[:end + 2])
        if _HANDS_OVER.search(head):  # chunked or 100-continue: the thread reads on
            return True
        length = _LENGTH.search(head)
        wanted = end + len(_END) + (int(length.group(1)) if length else 0)
        # A large body (an upload) goes to the thread once the head is in.
        return wanted > BUFFER_MAX or len(self.buffer) >= wanted


class _TimedSocket(socket.socket):
    """A client socket whose blocking mode has a timeout: gthread switches a socket to
    blocking before a thread reads or writes it, and a stalled body or a client that
    stops reading must raise in that thread instead of parking it for good."""

    __slots__ = ()

    def setblocking(self, flag: bool) -> None:
        if flag:
            self.settimeout(IO_TIMEOUT_SEC)
        else:
            super().setblocking(False)


class HeaderBufferingWorker(ThreadWorker):
    """gthread whose threads only ever see complete request heads."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reading: deque[_Reading] = deque()

    def accept(self, listener) -> None:
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        client_sock.__class__ = _TimedSocket  # same layout, only setblocking differs
        conn = TConn(self.cfg, client_sock, client_addr, listener.getsockname())
        if self.cfg.is_ssl:  # the TLS handshake happens in a thread, as gthread does
            self.enqueue_req(conn)
            return
        self._read_head(conn)

    def on_client_socket_readable(self, conn, client) -> None:
        """A kept-alive connection's next request is read like a new one's."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        if self.cfg.is_ssl:
            self.enqueue_req(conn)
            return
        self._read_head(conn)

    def _read_head(self, conn: TConn) -> None:
        conn.sock.setblocking(False)
        reading = _Reading(conn)
        self.reading.append(reading)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_bytes, reading))

    def _on_bytes(self, reading: _Reading, _sock) -> None:
        try:
            data = reading.conn.sock.recv(BUFFER_MAX - len(reading.buffer) or 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        reading.buffer += data
        ready = reading.complete() if data else None
        if ready is False:
            return
        self.poller.unregister(reading.conn.sock)
        self.reading.remove(reading)
        if ready is None:  # closed by the peer, or a head past BUFFER_MAX
            self._drop(reading.conn)
            return
        reading.conn.sandlot_head = bytes(reading.buffer)
        self.enqueue_req(reading.conn)

    def _drop(self, conn: TConn) -> None:
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        """gunicorn's sweep of idle connections, plus heads past their deadline."""
        super().murder_pending()
        now = time.monotonic()
        while self.reading and self.reading[0].deadline <= now:
            reading = self.reading.popleft()
            try:
                self.poller.unregister(reading.conn.sock)
            except (OSError, KeyError, ValueError):
                pass
            self._drop(reading.conn)

    def handle(self, conn):
        head = getattr(conn, "sandlot_head", None)
        if head is not None:
            conn.sandlot_head = None
            conn.data_ready = True
            conn.sock.setblocking(True)
            conn.init()
            conn.parser.unreader.unread(head)
        return super().handle(conn)
