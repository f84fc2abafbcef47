"""The name a new connection presents, from its first bytes: the SNI of a TLS ClientHello
(read by OpenSSL itself, through the standard library, so no TLS is parsed by hand) or
the Host of a plain HTTP request (the standard library's header parser).

`sniff(data)` answers ("tls", name | None), ("http", name | None), ("tcp", None), or
None while `data` is a prefix of a ClientHello or request head that needs more bytes.
"""

from __future__ import annotations

import email.parser
import email.policy
import ssl

from app.backends.docker.egress.policy import _domain

HEAD_MAX = 16384  # a ClientHello or request head longer than this is read as plain TCP
_METHODS = (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS", b"TRACE",
            b"CONNECT")


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    return context


def _stop_at_server_name(engine: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> int:
    engine.sandlot_name = name  # type: ignore[attr-defined]
    return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE  # stop here


_CONTEXT = _server_context()  # one for every connection: making one costs milliseconds
_CONTEXT.sni_callback = _stop_at_server_name


def _tls_name(data: bytes) -> tuple[str, str | None] | None:
    """Feed the bytes to an OpenSSL server that stops at the ClientHello's servername
    callback (it answers nothing: the bytes go upstream untouched)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    engine = _CONTEXT.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(data)
    try:
        engine.do_handshake()
    except ssl.SSLWantReadError:
        if not hasattr(engine, "sandlot_name"):
            return None if len(data) < HEAD_MAX else ("tls", None)
    except ssl.SSLError:
        pass  # the callback's alert, or not a ClientHello OpenSSL accepts
    name = getattr(engine, "sandlot_name", None)
    return "tls", _clean(name) if name else None


def _clean(name: str) -> str | None:
    value = name.strip().lower().rstrip(".")
    return value if value and _domain(value) is not None and " " not in value else None


def _http_name(data: bytes) -> tuple[str, str | None] | None:
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None if len(data) < HEAD_MAX else ("http", None)
    line, _, rest = data[:end].partition(b"\r\n")
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return "tcp", None
    headers = email.parser.BytesHeaderParser(policy=email.policy.HTTP).parsebytes(rest)
    hosts = headers.get_all("Host") or []
    if len(hosts) != 1:  # none (HTTP/1.0) or ambiguous: the address decides
        return "http", None
    host = str(hosts[0]).strip()
    if host.startswith("["):  # an IPv6 literal: not a name
        return "http", None
    return "http", _clean(host.rsplit(":", 1)[0] if ":" in host else host)


def sniff(data: bytes) -> tuple[str, str | None] | None:
    if not data:
        return "tcp", None
    if data[0] == 0x16:  # a TLS handshake record
        return _tls_name(data)
    word = data.split(b" ", 1)[0]
    if word in _METHODS:
        return _http_name(data)
    if len(data) < 8 and any(m.startswith(data) for m in _METHODS):
        return None
    return "tcp", None
