"""A tcp+TLS Docker host whose certificate is not signed by the configured CA is an auth
error, not "unreachable" (no engine needed: a local TLS server stands in for it)."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.backends.base import BackendAuthError
from app.backends.docker.backend import DockerBackend


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key, issuer: str, issuer_key, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=1))
               .not_valid_after(now + datetime.timedelta(hours=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert=None, key=None) -> None:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))


@contextmanager
def tls_listener(tmp_path: Path, server_key, server_cert,
                 answer: Callable[[ssl.SSLSocket], None]) -> Iterator[int]:
    """A TLS listener on loopback presenting `server_cert`; each connection that completes
    its handshake is given to `answer`. Yields the port."""
    _write(tmp_path / "srv.pem", server_cert)
    _write(tmp_path / "srv-key.pem", key=server_key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "srv.pem", tmp_path / "srv-key.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    answer(tls)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        listener.close()


@pytest.fixture
def untrusted_tls_server(tmp_path) -> Iterator[int]:
    """A TLS listener on loopback whose certificate comes from a CA the client lacks."""
    other_ca_key, server_key = _key(), _key()
    cert = _cert("localhost", server_key, "other CA", other_ca_key, False)
    with tls_listener(tmp_path, server_key, cert, lambda tls: None) as port:
        yield port


@pytest.fixture
def client_certs(tmp_path) -> Path:
    """ca.pem, cert.pem and key.pem of a CA that did not sign the server."""
    certs = tmp_path / "client"
    certs.mkdir()
    ca_key, client_key = _key(), _key()
    _write(certs / "ca.pem", _cert("our CA", ca_key, "our CA", ca_key, True))
    _write(certs / "cert.pem", _cert("client", client_key, "our CA", ca_key, False))
    _write(certs / "key.pem", key=client_key)
    return certs


def test_an_untrusted_engine_certificate_is_an_auth_error(untrusted_tls_server, client_certs):
    backend = DockerBackend({"host": f"tcp://localhost:{untrusted_tls_server}",
                             "tls_cert_path": str(client_certs), "http_timeout_sec": 5})

    with pytest.raises(BackendAuthError, match="TLS"):
        backend.health()


@pytest.fixture
def trusted_tls_engine(tmp_path) -> Iterator[tuple[int, Path]]:
    """A TLS listener signed by the engine's own private CA (ca.pem, cert.pem and key.pem
    in the returned directory) that answers every request with an engine's API version."""
    certs = tmp_path / "engine-client"
    certs.mkdir()
    ca_key, server_key, client_key = _key(), _key(), _key()
    _write(certs / "ca.pem", _cert("engine CA", ca_key, "engine CA", ca_key, True))
    _write(certs / "cert.pem", _cert("client", client_key, "engine CA", ca_key, False))
    _write(certs / "key.pem", key=client_key)

    def answer(tls: ssl.SSLSocket) -> None:
        tls.recv(65536)
        body = b'{"ApiVersion": "1.43"}'
        tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))

    cert = _cert("localhost", server_key, "engine CA", ca_key, False)
    with tls_listener(tmp_path, server_key, cert, answer) as port:
        yield port, certs


def test_an_engine_s_private_ca_is_used_whatever_requests_ca_bundle_says(
        trusted_tls_engine, client_certs, monkeypatch):
    """requests lets REQUESTS_CA_BUNDLE (or CURL_CA_BUNDLE) replace a session's own CA on
    every request; an operator's bundle for other services must not break, or widen,
    which certificate an engine may present."""
    port, certs = trusted_tls_engine
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(client_certs / "ca.pem"))  # another CA
    backend = DockerBackend({"host": f"tcp://localhost:{port}", "tls_cert_path": str(certs),
                             "http_timeout_sec": 5})

    backend.health()  # the engine's CA verifies it; the environment's bundle plays no part
