"""Fetching a skill source (reference 6.2): the archive a parsed source names, following
at most MAX_HOPS registry handoffs (JSON answers that point at the real archive).

Parsing a source into a Target is `sources`; this module does the network part.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from urllib.parse import urljoin, urlsplit

from app.security.safe_http import BlockedAddress, FetchError, SafeHTTPClient, TooLarge
from app.services.skills.bundles import sniff
from app.services.skills.limits import BundleTooLarge, MiB
from app.services.skills.sources import (
    ACCEPT,
    HANDOFF_MAX,
    MAX_HOPS,
    Fetched,
    Registries,
    SourceInvalid,
    Target,
    github,
    invalid,
    origin,
    parse,
    parse_url,
)


def fetch(source: str, regs: Registries, client: SafeHTTPClient, limit_mb: int) -> Fetched:
    """The archive `source` names, after at most MAX_HOPS registry handoffs."""
    target = parse(source, regs)
    for hop in range(MAX_HOPS + 1):
        response = _get(client, target.url, limit_mb)
        head = response.body.read(512)
        response.body.seek(0)
        kind = sniff(head)
        if kind is None and urlsplit(response.url).path.lower().endswith(".tar"):
            kind = "tar"
        if kind is not None:
            return Fetched(response.body, kind, target.subdir)
        try:
            if not _looks_like_json(response.content_type, head):
                raise invalid(f"{_show(target.url)} did not return a skill archive (zip, tar, "
                              "tar.gz or SKILL.md)")
            if hop == MAX_HOPS:
                raise invalid(f"the registry handed the request on more than {MAX_HOPS} times")
            target = handoff(target, _json(response), regs)
        finally:
            response.close()
    raise AssertionError("unreachable")


def _get(client: SafeHTTPClient, url: str, limit_mb: int):
    try:
        return client.get(url, max_bytes=limit_mb * MiB, accept=ACCEPT)
    except TooLarge:  # 413, as an oversize upload (decisions 13)
        raise BundleTooLarge(limit_mb) from None
    except BlockedAddress as exc:
        raise invalid(f"The skill source is refused: {_truncate(str(exc))}") from None
    except FetchError as exc:
        raise invalid(f"The skill source could not be fetched: {_truncate(str(exc))}") from None


def _looks_like_json(content_type: str, head: bytes) -> bool:
    return "json" in content_type.lower() or head.lstrip().startswith(b"{")


def _json(response) -> dict[str, Any]:
    if response.size > HANDOFF_MAX:
        raise invalid("the registry's answer is larger than 1 MiB")
    try:
        data = json.loads(response.body.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise invalid("the registry's answer is neither JSON nor a skill archive") from None
    if not isinstance(data, dict):
        raise invalid("the registry's answer is not a JSON object")
    return data


def handoff(previous: Target, data: dict[str, Any], regs: Registries) -> Target:
    """The next target a registry's JSON names (reference 6.2 handoff fields)."""
    if data.get("ok") is False:
        message = _text(data, "message") or _text(data, "reason") or "no reason given"
        raise invalid(f"The skill registry refused: {_truncate(message)}")
    if previous.kind == "github_release":
        tag = _text(data, "tag_name")
        if not tag:
            raise invalid("the GitHub release has no tag")
        return github(regs, previous.owner, previous.repo, tag)
    archive = data.get("archive") if isinstance(data.get("archive"), dict) else {}
    gh = data.get("github") if isinstance(data.get("github"), dict) else None
    url = _text(data, "archiveUrl") or _text(data, "downloadUrl") or _text(archive, "downloadUrl")
    path = (_text(data, "path") or _text(gh or {}, "path")).strip("/")
    commit = _text(data, "commit") or _text(gh or {}, "commit")
    if url:
        if url.startswith("/"):
            url = urljoin(previous.registry or origin(previous.url), url)
        target = parse_url(url, regs)
        if not target.subdir and path:
            target = replace(target, subdir=path)
        if target.kind == "github" and target.ref == "HEAD" and commit:
            target = github(regs, target.owner, target.repo, commit, target.subdir)
        return target
    if gh is None and _text(data, "installKind").lower() == "github":
        gh = {"repo": _text(data, "repo"), "path": path, "commit": commit}
    if gh is not None:
        return _from_github_handoff(gh, regs, path, commit)
    raise invalid("the registry's answer names no archive to download")


def _from_github_handoff(gh: dict[str, Any], regs: Registries, path: str, commit: str) -> Target:
    source_url = _text(gh, "sourceUrl")
    if source_url:
        try:
            target = parse_url(source_url, regs)
        except SourceInvalid:
            target = None
        if target is not None and target.kind == "github":
            return github(regs, target.owner, target.repo, commit or target.ref,
                          target.subdir or path)
    owner, _, repo = _text(gh, "repo").removesuffix(".git").partition("/")
    if not owner or not repo or "/" in repo:
        raise invalid("the registry's GitHub answer names no owner/repo")
    return github(regs, owner, repo, commit or "HEAD", path)


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value.strip() if isinstance(value, str) else ""


def _truncate(message: str) -> str:
    return " ".join(message.split())[:200]


def _show(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"[:200]
