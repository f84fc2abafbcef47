"""The serving side of a node: takes the calls for the engines this host owns off Redis,
runs them on the real DockerBackend and writes the answers back.

At most `max_calls` calls run at once (each holds a thread for as long as its command
runs); past that, calls wait on the list until one ends, and a caller withdraws its
call after PICKUP_SEC. A terminal holds two threads of its own for as long as it is
open. What a caller sends is decoded strictly (codec) and only DockerBackend's listed
methods are called, on engines this node owns.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from app.backends.base import Backend, BackendError, Terminal
from app.backends.remote import codec
from app.backends.remote.client import CALLBACKS, METHODS
from app.backends.remote.link import CALL_MAX_AGE_SEC, HEARTBEAT_SEC, REPLY_TTL_SEC, Link

log = logging.getLogger("sandlot.node")
OUT_BACKLOG = 64  # terminal output chunks queued for a caller before the shell waits
_PACKED = re.compile(r"^sandlot-carry-[A-Za-z0-9_]+\.tar$")


class Node:
    """Serves `engines` (name -> a factory of its backend from a call's settings)."""

    def __init__(self, link: Link, engines: dict[str, Callable[[dict[str, Any]], Backend]],
                 info: dict[str, Any], max_calls: int = 64):
        self.link, self.engines = link, engines
        self.id = uuid.uuid4().hex[:16]
        self.info = {"host": socket.gethostname(), "pid": os.getpid(), **info}
        self.max_calls = max_calls
        self._slots = threading.BoundedSemaphore(max_calls)
        self._pool = ThreadPoolExecutor(max_calls, thread_name_prefix="sandlot-node")
        self.stopping = threading.Event()
        self._beating = threading.Lock()  # a heartbeat never re-adds a withdrawn node
        self._taken = 0  # calls taken and not yet answered
        self._answered = threading.Condition()

    # -- the loops ----------------------------------------------------------------------

    def run(self) -> None:
        """Serve until `stopping` is set. Then take no new call (out of the live sets at
        once) but answer the calls taken, heart-beating as draining until they end (a
        command runs to its end or its timeout; SIGKILL ends it sooner, and its callers
        learn within LIVE_SEC), and leave."""
        done = threading.Event()
        beat = threading.Thread(target=self._beat, args=(done,),
                                name="sandlot-node-heartbeat", daemon=True)
        beat.start()
        names = list(self.engines)
        keys = [self.link.key("calls", name) for name in names]
        try:
            while not self.stopping.is_set():
                if not self._slots.acquire(timeout=1.0):
                    continue
                try:
                    item = self.link.client.blpop(keys, timeout=1.0)
                except redis.RedisError:
                    self._slots.release()
                    log.warning("the node cannot read its calls; retrying", exc_info=True)
                    self.stopping.wait(1.0)
                    continue
                if item is None:
                    self._slots.release()
                    continue
                with self._answered:
                    self._taken += 1
                self._pool.submit(self._serve, item[1])
        finally:
            self.stopping.set()
            try:
                with self._beating:
                    self.link.withdraw(self.id, names)
            except redis.RedisError:
                pass
            with self._answered:
                if self._taken:
                    log.info("node %s stopping: answering the %d calls it took first",
                             self.id, self._taken)
                self._answered.wait_for(lambda: not self._taken)
            done.set()
            try:
                self.link.leave(self.id, names)
            except redis.RedisError:
                pass
            self._pool.shutdown(wait=False, cancel_futures=False)

    def _beat(self, done: threading.Event) -> None:
        while not done.is_set():
            try:
                with self._beating:
                    if self.stopping.is_set():
                        self.link.drain_beat(self.id)
                    else:
                        self.link.beat(self.id, list(self.engines), self.info)
            except redis.RedisError:
                log.warning("the node's heartbeat did not reach Redis", exc_info=True)
            done.wait(HEARTBEAT_SEC)

    # -- one call -----------------------------------------------------------------------

    def _push(self, call_id: str, event: dict[str, Any]) -> None:
        key = self.link.key("reply", call_id)
        with self.link.client.pipeline(transaction=False) as pipe:
            pipe.rpush(key, self.link.pack(event))
            pipe.expire(key, REPLY_TTL_SEC)
            pipe.execute()

    def _serve(self, raw: bytes) -> None:
        try:
            self._answer(raw)
        finally:
            with self._answered:
                self._taken -= 1
                self._answered.notify_all()

    def _answer(self, raw: bytes) -> None:
        try:
            call = self.link.unpack(raw, max_age=CALL_MAX_AGE_SEC)
            call_id = str(call["id"])
            if not re.fullmatch(r"[0-9a-f]{32}", call_id):
                raise codec.WireError("a call id that is not one")
        except (codec.WireError, KeyError):
            log.warning("the node dropped a call that is not in its protocol or not sealed "
                        "with the deployment's keys")
            self._slots.release()
            return
        try:
            self._push(call_id, {"t": "taken", "node": self.id})
            value = self._run(call_id, call)
            self._push(call_id, {"t": "ok", "v": codec.encode(value)})
        except BackendError as exc:
            self._reply_error(call_id, exc)
        except codec.WireError as exc:
            self._reply_error(call_id, BackendError(f"The call was not understood: {exc}"))
        except Exception:  # noqa: BLE001 - the caller gets an answer whatever broke
            log.exception("node call %s failed", call.get("method"))
            self._reply_error(call_id, BackendError(
                "The Docker engine's node failed the call; its log says why."))
        finally:
            self._slots.release()

    def _reply_error(self, call_id: str, exc: BackendError) -> None:
        try:
            self._push(call_id, codec.error(exc))
        except redis.RedisError:
            log.warning("node call %s: its error could not be sent", call_id)

    def _run(self, call_id: str, call: dict[str, Any]) -> Any:
        engine, method = call.get("engine"), call.get("method")
        factory = self.engines.get(str(engine))
        if factory is None:
            raise BackendError(f"This node does not serve the Docker engine '{engine}'.")
        args = codec.decode(call.get("args"))
        settings = codec.decode(call.get("settings"))
        if not isinstance(args, dict) or not isinstance(settings, dict):
            raise codec.WireError("arguments that are not a mapping")
        if method == "discard_packed":
            return self._discard_packed(str(args.get("path") or ""))
        backend = factory(settings)
        try:
            if method == "open_terminal":
                return self._open_terminal(backend, args)
            if method not in METHODS:
                raise BackendError(f"'{method}' is not a call a node serves.")
            for hook in call.get("hooks") or ():
                if hook == "on_output":
                    args[hook] = lambda stream, chunk: self._push(call_id, {
                        "t": "out", "s": stream, "d": base64.b64encode(chunk).decode()})
                elif hook == "on_started":
                    args[hook] = lambda ref: self._push(call_id, {"t": "started", "ref": ref})
                elif hook not in CALLBACKS:
                    raise codec.WireError(f"an unknown hook {hook!r}")
            value = getattr(backend, method)(**args)
            if method == "engine_identity" and value:  # callers read it off the heartbeat
                known = {**(self.info.get("identities") or {}), str(engine): str(value)}
                self.info = {**self.info, "identities": known}  # one swap: beats read it
            return value
        finally:
            backend.close()

    @staticmethod
    def _discard_packed(path: str) -> None:
        """Remove an install's packed result, only ever one this host's pack made."""
        folder, name = os.path.split(path)
        if os.path.realpath(folder) != os.path.realpath(tempfile.gettempdir()) \
                or not _PACKED.match(name):
            raise BackendError("That is not a packed install result of this node.")
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    # -- terminals ------------------------------------------------------------------------

    def _open_terminal(self, backend: Backend, args: dict[str, Any]) -> str:
        sandbox_id = args.pop("sandbox_id")
        terminal = backend.open_terminal(sandbox_id, **args)
        term_id = uuid.uuid4().hex
        self.link.client.set(self.link.key("talive", term_id), b"1", ex=20)
        relay = _TerminalRelay(self.link, term_id, terminal)
        threading.Thread(target=relay.pump_out, name="sandlot-node-term-out",
                         daemon=True).start()
        threading.Thread(target=relay.pump_in, name="sandlot-node-term-in",
                         daemon=True).start()
        return term_id


class _TerminalRelay:
    """One open terminal on this host and its caller's two lists."""

    ALIVE_CHECK_SEC = 5.0

    def __init__(self, link: Link, term_id: str, terminal: Terminal):
        self.link, self.terminal = link, terminal
        self._in, self._out = link.key("tin", term_id), link.key("tout", term_id)
        self._alive = link.key("talive", term_id)
        self.done = threading.Event()
        self._ending = threading.Lock()

    def _caller_alive(self) -> bool:
        try:
            return bool(self.link.client.exists(self._alive))
        except redis.RedisError:
            return False

    def pump_out(self) -> None:
        checked = time.monotonic()
        try:
            while not self.done.is_set():
                data = self.terminal.read(1.0)
                if time.monotonic() - checked > self.ALIVE_CHECK_SEC:
                    checked = time.monotonic()
                    if not self._caller_alive():
                        break
                if data is None:
                    continue
                if data == b"":
                    break
                while self.link.client.llen(self._out) >= OUT_BACKLOG:
                    if self.done.wait(0.05) or not self._caller_alive():
                        return
                with self.link.client.pipeline(transaction=False) as pipe:
                    pipe.rpush(self._out, self.link.pack(
                        {"d": base64.b64encode(data).decode()}))
                    pipe.expire(self._out, 60)
                    pipe.execute()
        except redis.RedisError:
            log.warning("a terminal's output could not be relayed; closing it")
        finally:
            self._end()

    def pump_in(self) -> None:
        try:
            while not self.done.is_set():
                item = self.link.client.blpop([self._in], timeout=1.0)
                if item is None:
                    continue
                message = self.link.unpack(item[1])
                if "w" in message:
                    self.terminal.write(base64.b64decode(message["w"]))
                elif "r" in message:
                    cols, rows = message["r"]
                    self.terminal.resize(int(cols), int(rows))
                elif "c" in message:
                    break
        except (redis.RedisError, codec.WireError, ValueError, TypeError):
            log.warning("a terminal's input could not be relayed; closing it")
        finally:
            self._end()

    def _end(self) -> None:
        with self._ending:  # both pumps end here; the first closes
            if self.done.is_set():
                return
            self.done.set()
        self.terminal.close()
        try:
            with self.link.client.pipeline(transaction=False) as pipe:
                pipe.rpush(self._out, self.link.pack({"end": 1}))
                pipe.expire(self._out, 60)
                pipe.delete(self._in)
                pipe.execute()
        except redis.RedisError:
            pass
