"""The outbound URL guard: schemes, credentials, and which addresses count as public.

Name lookups are faked: a fixed table of test names, and anything else fails the test,
so nothing here ever leaves the machine."""

from __future__ import annotations

import socket

import pytest

from app.security.ssrf import UnsafeURL, check_url, is_never_allowed, is_public_address

FAKE_DNS = {
    "public.test": ["8.8.8.8"],
    "internal.test": ["10.0.0.7"],
    "mixed.test": ["8.8.8.8", "127.0.0.1"],
    "v6internal.test": ["fd00::7"],
    "metadata.test": ["169.254.169.254"],
    "mixed-metadata.test": ["8.8.8.8", "fd00:ec2::254"],
}


@pytest.fixture(autouse=True)
def fake_dns(monkeypatch):
    calls = []

    def getaddrinfo(host, port, *args, **kwargs):
        calls.append((host, port))
        if host == "nx.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host not in FAKE_DNS:
            raise AssertionError(f"unexpected lookup of {host!r}")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port)) for a in FAKE_DNS[host]]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return calls


PUBLIC = ["https://8.8.8.8/", "http://8.8.8.8:8080/v1?x=1", "http://[2606:4700::1]:8443/",
          "https://public.test/api", "HTTPS://8.8.8.8/"]


@pytest.mark.parametrize("url", PUBLIC)
def test_public_urls_pass(url):
    check_url(url, allow_private=False)


REFUSED_ALWAYS = [
    pytest.param("ftp://8.8.8.8/", "http or https", id="scheme-ftp"),
    pytest.param("file:///etc/passwd", "http or https", id="scheme-file"),
    pytest.param("gopher://8.8.8.8:70/", "http or https", id="scheme-gopher"),
    pytest.param("8.8.8.8/api", "http or https", id="no-scheme"),
    pytest.param("http:///path", "with a host", id="no-host"),
    pytest.param("https://user:pw@8.8.8.8/", "credentials", id="user-and-password"),
    pytest.param("https://token@8.8.8.8/", "credentials", id="user-only"),
    pytest.param("http://8.8.8.8\\@127.0.0.1/", "credentials", id="backslash-userinfo-trick"),
    pytest.param("http://8.8.8.8:99999/", "not a valid URL", id="port-out-of-range"),
    pytest.param("http://[::1/", "not a valid URL", id="broken-ipv6-bracket"),
]


@pytest.mark.parametrize(("url", "fragment"), REFUSED_ALWAYS)
@pytest.mark.parametrize("allow_private", [False, True], ids=["guarded", "private-allowed"])
def test_malformed_urls_refused_even_when_private_is_allowed(url, fragment, allow_private):
    with pytest.raises(UnsafeURL) as err:
        check_url(url, allow_private=allow_private)
    assert fragment in str(err.value)


PRIVATE = [
    pytest.param("http://127.0.0.1:9/", id="loopback"),
    pytest.param("http://127.8.9.10/", id="loopback-range"),
    pytest.param("http://[::1]/", id="loopback-v6"),
    pytest.param("http://10.0.0.1/", id="private-10"),
    pytest.param("http://172.16.5.4/", id="private-172"),
    pytest.param("http://192.168.1.1/", id="private-192"),
    pytest.param("http://[::ffff:127.0.0.1]/", id="ipv4-mapped-loopback"),
    pytest.param("http://[::ffff:10.0.0.1]/", id="ipv4-mapped-private"),
    pytest.param("http://100.100.100.200/", id="shared-address-space-metadata"),
    pytest.param("http://[fd00::1]/", id="unique-local-v6"),
    pytest.param("http://[2002:7f00:1::]/", id="6to4-embedding-loopback"),
    pytest.param("http://internal.test/", id="name-resolving-private"),
    pytest.param("http://mixed.test/", id="name-with-one-private-address"),
    pytest.param("http://v6internal.test/", id="name-resolving-ula"),
]
# Issue 9 item 3: never reachable, whatever the operator or the config says.
NEVER = [
    pytest.param("http://169.254.169.254/latest/meta-data/", id="link-local-metadata"),
    pytest.param("http://169.254.1.1/", id="link-local"),
    pytest.param("http://[fe80::1]/", id="link-local-v6"),
    pytest.param("http://[fe80::1%25eth0]/", id="link-local-v6-zone"),
    pytest.param("http://[fd00:ec2::254]/", id="aws-metadata-v6"),
    pytest.param("http://[::ffff:a9fe:a9fe]/", id="ipv4-mapped-metadata-hex"),
    pytest.param("http://[::ffff:169.254.169.254]/", id="ipv4-mapped-metadata"),
    pytest.param("http://[2002:a9fe:a9fe::]/", id="6to4-embedding-metadata"),
    pytest.param("http://0.0.0.0/", id="unspecified"),
    pytest.param("http://[::]/", id="unspecified-v6"),
    pytest.param("http://224.0.0.1/", id="multicast"),
    pytest.param("http://[ff02::1]/", id="multicast-v6"),
    pytest.param("http://metadata.test/", id="name-resolving-metadata"),
    pytest.param("http://mixed-metadata.test/", id="name-with-one-metadata-address"),
]


@pytest.mark.parametrize("url", PRIVATE)
def test_private_targets_refused(url):
    with pytest.raises(UnsafeURL) as err:
        check_url(url, allow_private=False)
    assert "allow_private_endpoints" in str(err.value) and err.value.private


@pytest.mark.parametrize("url", PRIVATE)
def test_private_targets_allowed_with_the_opt_in(url):
    check_url(url, allow_private=True)


@pytest.mark.parametrize("url", NEVER)
@pytest.mark.parametrize("allow_private", [False, True], ids=["guarded", "private-allowed"])
def test_link_local_metadata_unspecified_and_multicast_are_never_allowed(url, allow_private):
    with pytest.raises(UnsafeURL) as err:
        check_url(url, allow_private=allow_private)
    assert "never reachable" in str(err.value) and not err.value.private


@pytest.mark.parametrize("url", ["http://internal.test/", "http://metadata.test/",
                                 "http://10.0.0.1/"])
def test_refusals_do_not_name_the_address(url):
    with pytest.raises(UnsafeURL) as err:
        check_url(url, allow_private=False)
    assert not any(a in str(err.value) for a in ("10.0.0", "169.254"))


@pytest.mark.parametrize(("address", "never"), [
    ("169.254.169.254", True), ("fd00:ec2::254", True), ("0.0.0.0", True), ("::", True),
    ("224.0.0.251", True), ("ff02::1", True), ("fe80::1%eth0", True),
    ("::ffff:169.254.169.254", True), ("127.0.0.1", False), ("10.0.0.1", False),
    ("fd00::1", False), ("8.8.8.8", False), ("100.100.100.200", False),
])
def test_is_never_allowed(address, never):
    assert is_never_allowed(address) is never


def test_unresolvable_name_is_refused():
    with pytest.raises(UnsafeURL, match="cannot resolve host 'nx.test'"):
        check_url("https://nx.test/", allow_private=False)


def test_resolution_uses_the_url_port(fake_dns):
    check_url("https://public.test/", allow_private=False)
    check_url("http://public.test/", allow_private=False)
    check_url("http://public.test:8080/", allow_private=False)
    assert fake_dns == [("public.test", 443), ("public.test", 80), ("public.test", 8080)]


def test_schemes_can_be_narrowed():
    check_url("https://8.8.8.8/", allow_private=False, schemes=("https",))
    with pytest.raises(UnsafeURL, match="https URL"):
        check_url("http://8.8.8.8/", allow_private=False, schemes=("https",))


@pytest.mark.parametrize(("address", "public"), [
    ("8.8.8.8", True), ("1.1.1.1", True), ("2606:4700::1111", True),
    ("::ffff:8.8.8.8", True), ("2002:808:808::1", True),
    ("127.0.0.1", False), ("::1", False), ("10.1.2.3", False), ("172.31.255.255", False),
    ("192.168.0.1", False), ("169.254.169.254", False), ("fe80::1", False),
    ("fe80::1%eth0", False), ("fd12:3456::1", False), ("fec0::1", False),
    ("::ffff:127.0.0.1", False), ("::ffff:192.168.1.1", False), ("2002:a00:1::", False),
    ("0.0.0.0", False), ("::", False), ("100.64.0.1", False), ("100.127.255.254", False),
    ("224.0.0.251", False), ("ff02::1", False), ("255.255.255.255", False),
    ("240.0.0.1", False), ("192.0.2.10", False), ("198.18.0.1", False),
    ("2001:db8::1", False), ("64:ff9b::7f00:1", False),
])
def test_is_public_address(address, public):
    assert is_public_address(address) is public
