"""How the sandboxes' DNS resolver (dns.py) answers one query, from the policy of the
sandbox that asked:

- a name the policy allows (exact, or `*.suffix` for subdomains, not the apex) is
  forwarded to the sandbox's upstream; the A records of the answer (for the name and
  its CNAME chain) join the sandbox's nft set `sb_<id>_dns` for their TTL (at least
  MIN_TTL) before the answer is returned, so the connection that follows passes;
- under deny-by-default, any other name gets NXDOMAIN and is never forwarded, so DNS
  cannot carry data out;
- with egress open by default, every name is forwarded (deny_out works on IPs);
- names under `.invalid` are never forwarded (RFC 6761); `<id>.probe.sandlot.invalid`
  tells the backend whether the resolver serves sandbox <id> yet.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable

from dnslib import QTYPE, RCODE, DNSError, DNSHeader, DNSRecord

from app.backends.docker.egress import nft
from app.backends.docker.egress.policy import SandboxNet, learnable

MIN_TTL = 5  # seconds a learned IP stays in the set at least
MAX_TTL = 86400  # answers are never cached (or learned) longer than a day
UPSTREAM_TIMEOUT_SEC = 2.5
PROBE_SUFFIX = ".probe.sandlot.invalid"  # "<id>.probe.sandlot.invalid": is <id> served?

log = logging.getLogger("sandlot.egress.dns")


def _reply(query: DNSRecord, rcode: int) -> bytes:
    header = DNSHeader(id=query.header.id, qr=1, ra=1, rd=query.header.rd, rcode=rcode)
    return DNSRecord(header, q=query.q).pack()


def _upstream(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    host, _, port = spec.rpartition(":")
    return (host, int(port)) if host else (spec, 53)


def forward(data: bytes, upstream: tuple[str, int], query_id: int) -> bytes | None:
    """Ask the upstream over UDP (TCP when the answer is truncated); None on failure."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(UPSTREAM_TIMEOUT_SEC)
            sock.connect(upstream)
            sock.send(data)
            deadline = time.monotonic() + UPSTREAM_TIMEOUT_SEC
            while True:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                answer = sock.recv(65535)
                if len(answer) >= 12 and struct.unpack("!H", answer[:2])[0] == query_id:
                    break
        if not answer[2] & 0x02:  # TC bit clear
            return answer
        with socket.create_connection(upstream, timeout=UPSTREAM_TIMEOUT_SEC) as sock:
            sock.sendall(struct.pack("!H", len(data)) + data)
            size = struct.unpack("!H", read_exact(sock, 2))[0]
            return read_exact(sock, size)
    except (OSError, ValueError) as exc:
        log.warning("upstream %s:%s failed: %s", *upstream, exc)
        return None


def addresses(upstream: str | None, name: str) -> list[str] | None:
    """The A records `name` has now at `upstream` ("ip:port"), through `forward`; None
    when it could not be asked (no upstream, no answer, an unreadable one)."""
    if not upstream:
        return None
    host, _, port = upstream.rpartition(":")
    query = DNSRecord.question(name, "A")
    data = forward(query.pack(), (host, int(port)), query.header.id)
    try:
        answer = DNSRecord.parse(data) if data is not None else None
    except DNSError:
        return None
    return None if answer is None else [str(rr.rdata) for rr in answer.rr
                                         if rr.rtype == QTYPE.A]


def read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ValueError("connection closed")
        data += chunk
    return data


def _learn(net: SandboxNet, qname: str, response: bytes) -> bytes:
    """Add the answer's A records for `qname` (and its CNAME chain) to the sandbox's
    learned set, capping TTLs at MAX_TTL; the (possibly rewritten) answer to return."""
    answer = DNSRecord.parse(response)
    chain = {qname}
    for _ in range(len(answer.rr)):  # follow CNAMEs in whatever order they come
        chain |= {str(rr.rdata).lower().rstrip(".") for rr in answer.rr
                  if rr.rtype == QTYPE.CNAME and str(rr.rname).lower().rstrip(".") in chain}
    ips: dict[str, int] = {}
    capped = False
    for rr in answer.rr:
        if rr.ttl > MAX_TTL:
            rr.ttl, capped = MAX_TTL, True
        if rr.rtype != QTYPE.A or str(rr.rname).lower().rstrip(".") not in chain:
            continue
        ip = str(rr.rdata)
        if learnable(ip):
            ips[ip] = max(ips.get(ip, 0), max(MIN_TTL, rr.ttl))
        else:
            log.info("sandbox %s: %s -> %s not learned (special-use range)", net.id, qname, ip)
    nft.learn(net.id, ips)
    if ips:
        log.info("sandbox %s: %s -> %s", net.id, qname,
                 ", ".join(f"{ip} ({ttl}s)" for ip, ttl in sorted(ips.items())))
    return answer.pack() if capped else response


def answer(net: SandboxNet, data: bytes,
           on_refused: Callable[[SandboxNet, str], None] | None = None) -> bytes | None:
    """The reply to one query from `net`'s sandbox; None to drop what is not a query.
    `on_refused(net, name)` hears of each name refused by policy (the egress log)."""
    try:
        query = DNSRecord.parse(data)
    except (DNSError, ValueError, IndexError, struct.error):
        return None
    if query.header.qr:
        return None
    if query.header.opcode != 0 or len(query.questions) != 1:
        return _reply(query, RCODE.NOTIMP if query.header.opcode else RCODE.FORMERR)
    qname = str(query.q.qname).lower().rstrip(".")
    if qname == "invalid" or qname.endswith(".invalid"):  # RFC 6761: never forwarded
        if qname.endswith(PROBE_SUFFIX) and qname[:-len(PROBE_SUFFIX)] != net.id:
            return _reply(query, RCODE.REFUSED)
        return _reply(query, RCODE.NXDOMAIN)
    policy = net.policy
    allowed = policy.allows_name(qname)
    if policy.deny_all and not allowed:
        log.info("sandbox %s: %s %s refused (not in allow_out)", net.id,
                 QTYPE.get(query.q.qtype), qname)
        if on_refused is not None:
            on_refused(net, qname)
        return _reply(query, RCODE.NXDOMAIN)
    upstream = _upstream(net.upstream)
    response = forward(data, upstream, query.header.id) if upstream else None
    if response is None:
        return _reply(query, RCODE.SERVFAIL)
    if not allowed:
        return response
    try:
        return _learn(net, qname, response)
    except Exception as exc:  # noqa: BLE001 - fail closed: no answer the firewall won't honour
        log.warning("sandbox %s: %s not learned: %s", net.id, qname, exc)
        return _reply(query, RCODE.SERVFAIL)
