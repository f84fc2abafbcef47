"""Egress probes for the deep sandbox check (reference 5.4, decisions 6).

One exec inside the check sandbox fetches every target at once (python3 when the image
has it, else curl one by one) and prints, per target, whether a TCP connection opened
and which HTTP status came back. The policy helpers decide which targets the config's
network policy denies, so a failed probe can be reported as "restricted by policy"
and one denied target can serve as the egress canary.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from app.services.sandboxes import network_policy, targets
from app.services.sandboxes.targets import Target, TargetError

TIMEOUT_SEC = 8  # per target, as the reference's `curl -m 8`
NO_TOOL = "SANDLOT_NO_PROBE_TOOL"
ALLOWED_PROBES = 3  # names from Allowed destinations a deep check tries
PROXY_REFUSALS = (403, 407)  # how an egress proxy answers for a host it will not reach

# Runs inside the sandbox: argv = timeout, url... -> one JSON line, a result per url.
PYTHON = r"""
import json, socket, ssl, sys
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit
timeout = float(sys.argv[1])
def one(url):
    out = {"connected": False, "status": None, "error": ""}
    u = urlsplit(url)
    https = u.scheme == "https"
    try:
        port = u.port or (443 if https else 80)
        ip = socket.getaddrinfo(u.hostname, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError, ValueError):
        out["error"] = "name not resolved"
        return out
    try:
        sock = socket.create_connection((ip, port), timeout=timeout)
    except socket.timeout:
        out["error"] = "timed out"
        return out
    except ConnectionRefusedError:
        out["error"] = "connection refused"
        return out
    except OSError as exc:
        out["error"] = exc.strerror or type(exc).__name__
        return out
    out["connected"] = True
    try:
        if https:
            # Reachability, not trust: the image's CA bundle may not know a TLS-inspecting
            # egress proxy's CA, and nothing secret is sent on this connection.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            sock = context.wrap_socket(sock, server_hostname=u.hostname)
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        sock.sendall(("HEAD %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sandlot-check\r\n"
                      "Connection: close\r\n\r\n" % (path, u.netloc)).encode())
        data = b""
        while b"\r\n" not in data and len(data) < 4096:
            chunk = sock.recv(1024)
            if not chunk:
                break
            data += chunk
        parts = data.split(b" ", 2)
        if len(parts) > 1 and parts[1].isdigit():
            out["status"] = int(parts[1])
        else:
            out["error"] = "no HTTP answer"
    except ssl.SSLError as exc:
        out["error"] = "TLS failed: " + (exc.reason or "handshake")
    except socket.timeout:
        out["error"] = "timed out after connecting"
    except OSError as exc:
        out["error"] = exc.strerror or type(exc).__name__
    finally:
        sock.close()
    return out
with ThreadPoolExecutor(8) as pool:
    print("PY " + json.dumps(list(pool.map(one, sys.argv[2:]))))
"""

# Without python3: curl, one target after the other.
CURL = ('for u in "$@"; do out=$(curl -k -sS -m "$T" -I -o /dev/null '
        "-w '%{http_code} %{time_connect}' \"$u\" 2>/dev/null); echo \"CURL $? $out\"; done")
CURL_ERRORS = {6: "name not resolved", 7: "connection failed", 28: "timed out",
               35: "TLS failed", 51: "TLS failed", 60: "TLS failed"}


@dataclass(frozen=True)
class Probe:
    """What one target answered from inside the sandbox."""

    url: str
    connected: bool = False
    status: int | None = None
    error: str = ""

    @property
    def label(self) -> str:
        return label(self.url)

    @property
    def reached(self) -> bool:
        """An HTTP answer below 400, as `curl -f` counts success."""
        return self.status is not None and self.status < 400

    @property
    def answered(self) -> bool:
        """The host itself answered HTTP, whatever the status (an API's root may be a 404),
        unless it is how an egress proxy refuses."""
        return self.status is not None and self.status not in PROXY_REFUSALS

    def describe(self) -> str:
        if self.status is not None:
            return f"HTTP {self.status}"
        return self.error or "no answer"


def label(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc or url


def parse_urls(raw: str) -> list[str]:
    """SANDBOX_EGRESS_PROBE_URLS: comma-separated http(s) URLs; others are ignored."""
    urls = []
    for item in (raw or "").split(","):
        url = item.strip()
        if urlsplit(url).scheme in ("http", "https") and urlsplit(url).hostname:
            urls.append(url)
    return urls


def command(urls: list[str], timeout: int = TIMEOUT_SEC) -> str:
    """The shell command that probes `urls` (each argument shell-quoted)."""
    args = " ".join(shlex.quote(u) for u in urls)
    return (f"if command -v python3 >/dev/null 2>&1; then "
            f"python3 -c {shlex.quote(PYTHON)} {timeout} {args}; "
            f"elif command -v curl >/dev/null 2>&1; then "
            f"T={timeout} sh -c {shlex.quote(CURL)} probe {args}; "
            f"else echo {NO_TOOL}; fi")


def exec_timeout(urls: list[str], timeout: int = TIMEOUT_SEC) -> int:
    """Enough for the slower of the two ways (curl runs the targets one by one)."""
    return timeout * max(2, len(urls)) + 5


def parse(stdout: str, urls: list[str]) -> list[Probe] | None:
    """Per-url results, or None when the sandbox had no tool to probe with."""
    lines = stdout.splitlines()
    for line in lines:
        if line.startswith("PY "):
            rows = json.loads(line[3:])
            return [Probe(url, bool(r.get("connected")), r.get("status"), str(r.get("error") or ""))
                    for url, r in zip(urls, rows, strict=False)]
    curl = [line.split()[1:] for line in lines if line.startswith("CURL ")]
    if curl:
        return [_curl(url, row) for url, row in zip(urls, curl, strict=False)]
    return None


def _curl(url: str, row: list[str]) -> Probe:
    code = int(row[0]) if row and row[0].isdigit() else -1
    status = int(row[1]) if len(row) > 1 and row[1].isdigit() and row[1] != "000" else None
    try:
        connected = len(row) > 2 and float(row[2]) > 0
    except ValueError:
        connected = False
    if code == 0 and status is not None:
        return Probe(url, True, status)
    return Probe(url, connected or status is not None, status,
                 CURL_ERRORS.get(code, f"curl exit {code}"))


# -- what the policy denies ------------------------------------------------------------------

def no_network(doc: dict[str, Any]) -> bool:
    return doc["sandbox_type"] == "docker" and (doc.get("docker") or {}).get(
        "network_mode") == "none"


def restricted(doc: dict[str, Any]) -> bool:
    """Egress is closed unless allowed: deny by default (either form), or no network."""
    return no_network(doc) or network_policy.denies_by_default(doc.get("network"))


def _targets(entries: Any, wildcard_ok: bool) -> list[Target]:
    found = []
    for entry in entries or []:
        try:
            found.append(targets.classify(str(entry), wildcard_ok=wildcard_ok))
        except TargetError:
            continue
    return found


def _ip_in(ip: ipaddress.IPv4Address, targets: list[Target]) -> bool:
    return any(t.kind == "ip" and ip in ipaddress.ip_network(t.key) for t in targets)


def denies(doc: dict[str, Any], url: str) -> bool:
    """Whether the policy denies this URL's host: allow > deny > default (reference 4.3)."""
    if no_network(doc):
        return True
    network = doc.get("network") or {}
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    allow = _targets(network.get("allow_out"), wildcard_ok=True)
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        ip = None
    if ip is not None:
        if _ip_in(ip, allow):
            return False
        if _ip_in(ip, _targets(network.get("deny_out"), wildcard_ok=False)):
            return True
    elif network_policy.covered(host, allow):
        return False
    elif _cube_denies(network, host):
        return True
    return network_policy.denies_by_default(network)


def _cube_denies(network: dict[str, Any], host: str) -> bool:
    return any(rule.get("deny") and str(rule.get("host") or "").lower().split(":")[0] == host
               for rule in network.get("cube_rules") or [] if isinstance(rule, dict))


def denies_anything(doc: dict[str, Any]) -> bool:
    network = doc.get("network") or {}
    return (restricted(doc) or bool(network.get("deny_out"))
            or any(isinstance(r, dict) and r.get("deny") for r in network.get("cube_rules") or []))


def denied_target(doc: dict[str, Any], urls: list[str]) -> str | None:
    """One target the policy denies, for the canary: a probe URL when one is denied (a
    server known to answer), else a deny_out address, else a denied cube rule's host."""
    for url in urls:
        if denies(doc, url):
            return url
    network = doc.get("network") or {}
    for target in _targets(network.get("deny_out"), wildcard_ok=False):
        net = ipaddress.ip_network(target.key)
        if net.prefixlen == 0:
            continue
        ip = net.network_address if net.num_addresses <= 2 else net.network_address + 1
        url = f"http://{ip}/"
        if denies(doc, url):
            return url
    for rule in network.get("cube_rules") or []:
        host = str(rule.get("host") or "").split(":")[0] if isinstance(rule, dict) else ""
        if rule.get("deny") and host and not host.startswith("*."):
            scheme = str(rule.get("scheme") or "https").lower()
            return f"{scheme}://{host}/"
    return None


def allowed_urls(doc: dict[str, Any], urls: list[str]) -> list[str]:
    """What the deep check tries of the policy's own Allowed destinations: the first
    ALLOWED_PROBES names (a wildcard names no host; addresses carry no port to try), as
    written, over HTTPS, or the probe URL of the same host when there is one."""
    if no_network(doc):
        return []
    found: list[str] = []
    for entry in (doc.get("network") or {}).get("allow_out") or []:
        name = str(entry).strip().rstrip(".")
        try:
            target = targets.classify(name, wildcard_ok=True)
        except TargetError:
            continue
        if target.kind != "domain" or target.wildcard:
            continue
        same = next((u for u in urls if urlsplit(u).hostname == target.key), None)
        url = same or f"https://{name}/"
        if url not in found:
            found.append(url)
        if len(found) == ALLOWED_PROBES:
            break
    return found


# -- verdicts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """egress_available: ok (None: restricted by policy), its message, and each target
    (`listed`: one of the config's Allowed destinations, where no answer is a warning)."""

    ok: bool | None
    message: str
    targets: list[dict[str, Any]]


def egress_verdict(doc: dict[str, Any], allowed: list[Probe], probes: list[Probe]) -> Verdict:
    """The policy's allowed destinations must answer (one that does not is a warning, all
    of them a failure); otherwise the first probe target that answers proves egress, and
    when none does because the policy denies them it is "restricted", not failed."""
    shown = [{"host": p.label, "listed": True, "allowed": True, "reachable": p.answered,
              "detail": p.describe()} for p in allowed]
    shown += [{"host": p.label, "listed": False, "allowed": not denies(doc, p.url),
               "reachable": p.reached, "detail": p.describe()} for p in probes]
    hit = next((p for p in allowed if p.answered), None) or next(
        (p for p in probes if p.reached), None)
    down = ", ".join(f"{p.label} ({p.describe()})" for p in allowed if not p.answered)
    if hit is not None:
        message = f"Reachable via {hit.label}."
        if down:
            message += (f" Allowed but not reachable: {down}: check the name, and that it "
                        "answers HTTPS.")
        return Verdict(True, message, shown)
    if down:
        return Verdict(False, f"No allowed destination answered: {down}. Check each name, "
                       "and that it answers HTTPS.", shown)
    if no_network(doc):
        why = "the sandbox has no network (Network mode: none)."
    elif restricted(doc):
        why = ("this config denies egress by default and its Allowed destinations name no "
               "host to try.")
    elif probes and all(denies(doc, p.url) for p in probes):
        why = "the policy denies every probe target."
    else:
        tried = "; ".join(f"{p.label}: {p.describe()}" for p in probes)
        return Verdict(False, f"No probe target answered ({tried}).", shown)
    return Verdict(None, f"Restricted by policy: {why}{advice(doc, probes)}", shown)


def advice(doc: dict[str, Any], probes: list[Probe]) -> str:
    """What to add for the probe targets to be reachable: only hosts the policy denies
    (never one it already allows), by the form's label."""
    if no_network(doc):
        return ""
    hosts: list[str] = []
    for p in probes:
        host = urlsplit(p.url).hostname or p.label
        if denies(doc, p.url) and host not in hosts:
            hosts.append(host)
    if not hosts:
        return ""
    names = hosts[0] if len(hosts) == 1 else ", ".join(hosts[:-1]) + " and " + hosts[-1]
    them = "it" if len(hosts) == 1 else "them"
    return f" To let sandboxes reach {names}, add {them} to Allowed destinations."


def canary_verdict(result: Probe) -> tuple[bool, str]:
    """(ok, message) for egress_denied_enforced: a denied target must not be reachable."""
    if result.reached or (result.connected and result.status is None):
        return False, (f"The policy denies {result.label}, but the sandbox reached it "
                       f"({result.describe()}).")
    if result.connected:  # an egress proxy answered for it with a refusal
        return True, (f"{result.label} is denied by the policy and the provider refused it "
                      f"({result.describe()}).")
    return True, f"{result.label} is denied by the policy and blocked ({result.describe()})."
