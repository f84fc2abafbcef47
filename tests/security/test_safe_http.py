"""The SSRF-safe client: private targets refused before connecting, after every redirect and
for every DNS answer; connections go to the vetted address; size and time are bounded."""

from __future__ import annotations

import socket
import threading

import pytest

from app.security.safe_http import (
    BlockedAddress,
    FetchError,
    HTTPStatus,
    SafeHTTPClient,
    TooLarge,
    offline_resolver,
)
from tests.fakes.skill_registry import FakeSite

PUBLIC = "93.184.216.34"  # a public address; the test connector maps it to a local server


@pytest.fixture
def site():
    server = FakeSite()
    yield server
    server.stop()


class Network:
    """Plays DNS and routing: names -> addresses, public addresses -> local ports."""

    def __init__(self, dns: dict[str, list[str]], routes: dict[str, int]):
        self.dns, self.routes = dns, routes
        self.lookups: list[str] = []
        self.connected: list[tuple[str, int]] = []

    def resolve(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        return self.dns.get(host) or offline_resolver(host, port)  # IP literals as themselves

    def connect(self, address: str, port: int, timeout: float) -> socket.socket:
        self.connected.append((address, port))
        return socket.create_connection(("127.0.0.1", self.routes[address]), timeout=timeout)


def test_a_loopback_target_is_refused_before_connecting(site):
    site.add("/skill.zip", b"PK\x05\x06" + b"\0" * 18)
    client = SafeHTTPClient(allow_private=False)
    with pytest.raises(BlockedAddress, match="private, loopback or other special-use"):
        client.get(site.url + "/skill.zip", max_bytes=1024)
    assert site.connections == 0


@pytest.mark.parametrize("url", ["http://localhost/x.zip", "http://[::1]/x.zip",
                                 "http://169.254.169.254/latest", "http://10.1.2.3/x",
                                 "http://100.64.0.1/x"])
def test_private_loopback_and_link_local_names_are_refused(url):
    client = SafeHTTPClient(allow_private=False, resolver=offline_resolver,
                            connector=lambda *a: pytest.fail("must not connect"))
    with pytest.raises(BlockedAddress):
        client.get(url, max_bytes=1024)


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest", "http://[fd00:ec2::254]/x",
                                 "http://0.0.0.0/x", "http://224.0.0.1/x",
                                 "http://[::ffff:169.254.169.254]/x"])
def test_metadata_link_local_unspecified_and_multicast_stay_refused_when_private_is_allowed(
        url):
    client = SafeHTTPClient(allow_private=True, resolver=offline_resolver,
                            connector=lambda *a: pytest.fail("must not connect"))
    with pytest.raises(BlockedAddress, match="never reachable"):
        client.get(url, max_bytes=1024)


def test_a_redirect_to_a_private_address_is_refused_before_following(site):
    inner = FakeSite()
    try:
        inner.add("/secret", b"internal")
        site.redirect("/skill.zip", inner.url + "/secret")
        net = Network({"registry.test": [PUBLIC]}, {PUBLIC: site.server.server_port})
        client = SafeHTTPClient(resolver=net.resolve, connector=net.connect)
        with pytest.raises(BlockedAddress, match=r"127\.0\.0\.1"):
            client.get("http://registry.test/skill.zip", max_bytes=1024)
        assert net.connected == [(PUBLIC, 80)]
        assert inner.connections == 0
    finally:
        inner.stop()


def test_a_redirect_to_a_name_with_a_private_answer_is_refused(site):
    site.redirect("/a", "http://internal.test/b")
    net = Network({"registry.test": [PUBLIC], "internal.test": ["10.0.0.7"]},
                  {PUBLIC: site.server.server_port})
    client = SafeHTTPClient(resolver=net.resolve, connector=net.connect)
    with pytest.raises(BlockedAddress, match="internal.test") as caught:
        client.get("http://registry.test/a", max_bytes=1024)
    assert "10.0.0.7" not in str(caught.value)  # internal DNS is not told to tenants
    assert net.lookups == ["registry.test", "internal.test"]
    assert net.connected == [(PUBLIC, 80)]


def test_one_private_dns_answer_among_public_ones_refuses_the_host(site):
    net = Network({"mixed.test": [PUBLIC, "192.168.1.5"]}, {PUBLIC: site.server.server_port})
    client = SafeHTTPClient(resolver=net.resolve, connector=net.connect)
    with pytest.raises(BlockedAddress, match="mixed.test") as caught:
        client.get("http://mixed.test/x.zip", max_bytes=1024)
    assert "192.168.1.5" not in str(caught.value)
    assert net.connected == []
    assert site.connections == 0


def test_the_connection_goes_to_the_vetted_address_and_keeps_the_host_name(site):
    site.add("/skill.zip", b"zipbytes")
    net = Network({"registry.test": [PUBLIC]}, {PUBLIC: site.server.server_port})
    client = SafeHTTPClient(resolver=net.resolve, connector=net.connect, user_agent="UA-Test")
    response = client.get("http://registry.test/skill.zip", max_bytes=1024)
    assert response.body.read() == b"zipbytes"
    assert net.lookups == ["registry.test"]  # resolved once, never again behind our back
    assert net.connected == [(PUBLIC, 80)]
    headers = site.requests[0]["headers"]
    assert headers["Host"] == "registry.test"
    assert headers["User-Agent"] == "UA-Test"
    assert "Authorization" not in headers and "Cookie" not in headers


def test_allow_private_lifts_the_guard_for_tests(site):
    site.add("/ok", b"fine")
    site.redirect("/hop", "/ok")
    response = SafeHTTPClient(allow_private=True).get(site.url + "/hop", max_bytes=1024)
    assert response.body.read() == b"fine"
    assert response.url.endswith("/ok")


def test_a_body_over_the_limit_is_refused_while_streaming(site):
    site.add("/big", b"x" * 300_000, chunked=True)  # no Content-Length to trust
    with pytest.raises(TooLarge):
        SafeHTTPClient(allow_private=True).get(site.url + "/big", max_bytes=100_000)


def test_a_declared_length_over_the_limit_is_refused_before_reading(site):
    site.add("/big", b"x" * 300_000)
    with pytest.raises(TooLarge):
        SafeHTTPClient(allow_private=True).get(site.url + "/big", max_bytes=100_000)


def test_the_total_deadline_stops_a_slow_server(site):
    site.add("/slow", b"late", delay=2.0)
    client = SafeHTTPClient(allow_private=True, total_timeout=0.5)
    with pytest.raises(FetchError, match="timed out|longer than"):
        client.get(site.url + "/slow", max_bytes=1024)


def test_an_unreachable_host_is_a_clear_error():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(FetchError, match="could not reach .*connection refused"):
        SafeHTTPClient(allow_private=True).get(f"http://127.0.0.1:{port}/x", max_bytes=10)


def test_http_errors_carry_a_bounded_preview(site):
    site.add("/gone", b"nope " * 500, content_type="text/plain")
    site.routes["/gone"].status = 410
    with pytest.raises(HTTPStatus) as caught:
        SafeHTTPClient(allow_private=True).get(site.url + "/gone?token=secret", max_bytes=10)
    assert caught.value.status == 410 and "secret" not in str(caught.value)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd",
                                 "http://user:pw@example.com/x", "http:///nohost"])
def test_only_plain_http_urls_without_credentials(url):
    with pytest.raises(FetchError):
        SafeHTTPClient(resolver=offline_resolver).get(url, max_bytes=10)


def test_the_offline_resolver_never_asks_dns():
    assert offline_resolver("localhost", 80) == ["127.0.0.1"]
    assert offline_resolver("[::1]", 80) == ["::1"]
    with pytest.raises(ValueError, match="name resolution is off"):
        offline_resolver("example.com", 443)


class RawSite:
    """A server that answers every request with the exact bytes given, then closes: registries
    answer in every HTTP dialect, and the client must read each of them."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with self.listener:
            conn, _ = self.listener.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
                conn.sendall(self.raw)


BODY = b"PK-fake-archive-" * 1000


def chunked(body: bytes, size: int = 4000) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
             for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


DIALECTS = {
    "1.0 with length": b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY,
    "1.0 until close": b"HTTP/1.0 200 OK\r\nContent-Type: application/zip\r\n\r\n" + BODY,
    "1.1 close with length": (b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY),
    "1.1 close chunked": (b"HTTP/1.1 200 OK\r\nConnection: close\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY)),
    "1.1 keep-alive with length": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY)
                                   + BODY),
    "1.1 keep-alive chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                               + chunked(BODY)),
}


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_every_well_formed_http_answer_is_read_whole(dialect):
    site = RawSite(DIALECTS[dialect])
    response = SafeHTTPClient(allow_private=True).get(site.url + "/skill.zip", max_bytes=1 << 20)
    try:
        assert response.status == 200
        assert response.size == len(BODY)
        assert response.body.read() == BODY
    finally:
        response.close()


@pytest.mark.parametrize("dialect", ["1.0 until close", "1.1 close chunked"])
def test_an_answer_over_the_limit_is_refused_in_every_dialect(dialect):
    site = RawSite(DIALECTS[dialect])
    with pytest.raises(TooLarge):
        SafeHTTPClient(allow_private=True).get(site.url + "/skill.zip", max_bytes=1000)
