"""Skill sources (reference 6.2): a source string -> where to fetch it -> an archive.

`parse` maps one paste onto exactly one first target without touching the network
(`owner/slug` is both a ClawHub locator and a GitHub repository, so it is refused rather
than guessed). `fetch` downloads through the SSRF-safe client and follows registry JSON
handoffs, at most MAX_HOPS of them. Every base URL comes from settings (`Registries`), so
tests and mirrors point them at their own servers. All fetches are anonymous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import IO
from urllib.parse import quote, urlencode, urlsplit

from app.errors import BadRequest
from app.services.skills.manifest import is_semver

MiB = 1024 * 1024
MAX_HOPS = 3
SOURCE_MAX = 2048
HANDOFF_MAX = MiB
ARCHIVE_SUFFIXES = (".zip", ".tgz", ".tar.gz", ".tar", ".md")
ACCEPT = ("application/zip, application/gzip, application/x-tar, application/octet-stream, "
          "application/json, text/markdown;q=0.9, text/plain;q=0.9, */*;q=0.8")
SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


class SourceInvalid(BadRequest):
    """Reference 6.2 `ErrSkillSourceInvalid`: every source failure is a 400."""

    code = "skill_source_invalid"


def invalid(message: str) -> SourceInvalid:
    return SourceInvalid(message)


@dataclass(frozen=True)
class Registries:
    clawhub: str
    skillhub: str
    skillhub_api: str
    skills_sh: str
    github: str
    codeload: str
    github_api: str
    gitlab: str

    @classmethod
    def from_config(cls, config) -> Registries:
        return cls(*(config[name].rstrip("/") for name in (
            "CLAWHUB_URL", "SKILLHUB_URL", "SKILLHUB_API_URL", "SKILLS_SH_URL", "GITHUB_URL",
            "GITHUB_CODELOAD_URL", "GITHUB_API_URL", "GITLAB_URL")))


@dataclass(frozen=True)
class Target:
    kind: str  # registry | skills_sh | github | gitlab | github_release | direct
    url: str
    subdir: str = ""
    registry: str = ""  # origin that relative handoff URLs are resolved against
    owner: str = ""
    repo: str = ""
    ref: str = ""


@dataclass
class Fetched:
    body: IO[bytes]
    kind: str  # a skill_bundles.sniff kind
    subdir: str

    def close(self) -> None:
        self.body.close()


# ---------------------------------------------------------------- parsing

def parse(source: str, regs: Registries) -> Target:
    text = (source or "").strip()
    if not text:
        raise invalid("source is required")
    if len(text) > SOURCE_MAX or re.search(r"[\x00-\x1f\x7f\s]", text):
        raise invalid("the source must be one line without spaces, at most 2048 characters")
    text = text.rstrip("/")
    if "://" in text:
        return parse_url(text, regs)
    lower = text.lower()
    for prefix in ("skills-sh:", "skills-sh/"):
        if lower.startswith(prefix):
            return _skills_sh(regs.clawhub, _parts(text[len(prefix):]))
    if text.startswith("@"):
        return _registry(regs.clawhub, text[1:], clawhub=True)
    if "/" in text:
        raise invalid(f"{text!r} is ambiguous (ClawHub skill or GitHub repository?); use "
                      f"@{text} for ClawHub, or paste a full github.com, gitlab.com, skills.sh "
                      "or skillhub URL")
    return _registry(regs.clawhub, text, clawhub=True)


def parse_url(url: str, regs: Registries) -> Target:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise invalid("the source is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid("only http(s) source URLs are allowed")
    site = _site(url)
    if site == _site(regs.codeload):
        return Target("direct", url, registry=origin(url))
    if site == _site(regs.github):
        return _github_url(parts, regs)
    if site == _site(regs.gitlab):
        return _gitlab_url(parts, regs)
    if site == _site(regs.skills_sh):
        return _skills_sh_url(parts, regs)
    if site in (_site(regs.clawhub), *_ALIASES["clawhub"]):
        return _registry_url(parts, regs.clawhub, clawhub=True)
    if site in (_site(regs.skillhub), _site(regs.skillhub_api), *_ALIASES["skillhub"]):
        return _skillhub_url(parts, regs)
    if parts.path.lower().endswith(ARCHIVE_SUFFIXES):
        return Target("direct", url, registry=origin(url))
    return _registry_url(parts, origin(url), clawhub=False)  # a self-hosted registry


_ALIASES = {"clawhub": {("clawhub.ai", 443), ("clawhub.com", 443)},
            "skillhub": {("skillhub.cn", 443), ("api.skillhub.cn", 443)}}


def _site(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().removeprefix("www.")
    return host, parts.port or (443 if parts.scheme == "https" else 80)


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _parts(path: str) -> list[str]:
    return [p for p in path.strip("/").split("/") if p not in ("", ".")]


def _segment(value: str, what: str) -> str:
    if not SEGMENT.match(value):
        raise invalid(f"the {what} {value[:80]!r} is not valid")
    return value


def split_version(spec: str) -> tuple[str, str]:
    """'slug@1.2.0' -> ('slug', '1.2.0'); a version must look like semver or be 'latest'."""
    at = spec.rfind("@")
    if at <= 0:
        return spec, ""
    version = spec[at + 1:]
    if version.lower() != "latest" and not is_semver(version):
        raise invalid(f"the version {version[:64]!r} must look like semver (1.2.3) or be "
                      "'latest'")
    return spec[:at], version


def _registry(origin: str, spec: str, *, clawhub: bool, version: str = "") -> Target:
    spec, from_spec = split_version(spec.strip().lstrip("@"))
    version = from_spec or version
    if version and version.lower() != "latest" and not is_semver(version):
        raise invalid(f"the version {version[:64]!r} must look like semver (1.2.3) or be "
                      "'latest'")
    parts = _parts(spec)
    if not parts:
        raise invalid("a skill slug is required")
    owner = ""
    if clawhub and len(parts) == 2:
        owner, parts = parts[0], parts[1:]
    if len(parts) > (1 if clawhub else 2):
        raise invalid("the registry path is not owner/slug")
    slug = "/".join(_segment(p, "skill slug") for p in parts)
    query = {"slug": slug}
    if owner:
        query["ownerHandle"] = _segment(owner, "owner")
    if version and version.lower() != "latest":
        query["version"] = version
    return Target("registry", f"{origin}/api/v1/download?{urlencode(query)}", registry=origin)


def _registry_url(parts, origin: str, *, clawhub: bool) -> Target:
    path = parts.path.strip("/")
    if path.startswith("api/v1/download"):
        return Target("direct", parts.geturl(), registry=origin)
    segments = _parts(path)
    if segments and segments[0].lower() == "skills-sh":
        return _skills_sh(origin, segments[1:])
    if segments and segments[0].lower() == "skills":
        segments = segments[1:]
    if len(segments) >= 3 and segments[1].lower() == "skills":
        segments = [segments[0], segments[2]]
    if not segments:
        raise invalid("a skill slug is required")
    if len(segments) > 2:
        raise invalid("the registry page path is not recognised (expected /owner/slug)")
    version = _query_version(parts) or parts.fragment.strip()
    return _registry(origin, "/".join(segments), clawhub=clawhub, version=version)


def _query_version(parts) -> str:
    from urllib.parse import parse_qs

    return (parse_qs(parts.query).get("version") or [""])[0].strip()


def _skills_sh(origin: str, segments: list[str]) -> Target:
    if len(segments) != 3:
        raise invalid("a skills.sh locator must be owner/repo/slug")
    owner, repo = (_segment(s.lower(), "skills.sh name") for s in segments[:2])
    repo = repo.removesuffix(".git")
    slug = _segment(split_version(segments[2].lower())[0], "skills.sh name")
    reference = f"skills-sh:{owner}/{repo}/{slug}"
    url = f"{origin}/api/v1/skills/{quote(slug)}/install?{urlencode({'reference': reference})}"
    return Target("skills_sh", url, registry=origin)


def _skills_sh_url(parts, regs: Registries) -> Target:
    segments = _parts(parts.path)
    if len(segments) < 2:
        raise invalid("a skills.sh URL must be owner/repo or owner/repo/slug")
    if len(segments) >= 3:
        return _skills_sh(regs.clawhub, segments)
    return github(regs, segments[0], segments[1].removesuffix(".git"))


def _skillhub_url(parts, regs: Registries) -> Target:
    path = parts.path.strip("/")
    if path.startswith("api/v1/download"):
        query = f"?{parts.query}" if parts.query else ""
        return Target("direct", f"{regs.skillhub_api}/api/v1/download{query}",
                      registry=regs.skillhub_api)
    segments = _parts(path)
    if segments and segments[0].lower() == "skills":
        segments = segments[1:]
    if not 1 <= len(segments) <= 2:
        raise invalid("a SkillHub URL must be /skills/<publisher>/<slug>")
    version = _query_version(parts) or parts.fragment.strip()
    return _registry(regs.skillhub_api, segments[-1], clawhub=False, version=version)


def github(regs: Registries, owner: str, repo: str, ref: str = "HEAD",
           subdir: str = "") -> Target:
    owner, repo = _segment(owner, "GitHub owner"), _segment(repo, "GitHub repository")
    ref = ref or "HEAD"
    url = f"{regs.codeload}/{quote(owner)}/{quote(repo)}/zip/{quote(ref, safe='/')}"
    return Target("github", url, subdir=subdir.strip("/"), owner=owner, repo=repo, ref=ref)


def _github_url(parts, regs: Registries) -> Target:
    segments = _parts(parts.path)
    if len(segments) < 2:
        raise invalid("a GitHub URL must name owner/repo")
    owner, repo, rest = segments[0], segments[1].removesuffix(".git"), segments[2:]
    if not rest:
        return github(regs, owner, repo)
    if rest[0] in ("tree", "blob"):
        if len(rest) < 2:
            raise invalid("the GitHub URL is missing a branch, tag or commit")
        subdir = "/".join(rest[2:])
        if rest[0] == "blob" and subdir.rsplit("/", 1)[-1].lower() == "skill.md":
            subdir = subdir.rpartition("/")[0]
        return github(regs, owner, repo, rest[1], subdir)
    if rest[0] == "archive":
        return Target("direct", parts.geturl(), registry=origin(parts.geturl()))
    if rest[0] == "releases":
        return _github_release(parts, regs, owner, repo, rest[1:])
    return github(regs, owner, repo, "HEAD", "/".join(rest))


def _github_release(parts, regs: Registries, owner: str, repo: str, rest: list[str]) -> Target:
    if rest[:1] == ["download"]:
        return Target("direct", parts.geturl(), registry=origin(parts.geturl()))
    if rest[:1] == ["tag"] and len(rest) >= 2:
        return github(regs, owner, repo, "/".join(rest[1:]))
    owner, repo = _segment(owner, "GitHub owner"), _segment(repo, "GitHub repository")
    url = f"{regs.github_api}/repos/{quote(owner)}/{quote(repo)}/releases/latest"
    return Target("github_release", url, owner=owner, repo=repo)


def _gitlab_url(parts, regs: Registries) -> Target:
    path = parts.path.strip("/")
    project, _, extra = path.partition("/-/")
    segments = _parts(project)
    if len(segments) < 2:
        raise invalid("a GitLab URL must name group/project")
    repo = _segment(segments[-1].removesuffix(".git"), "GitLab project")
    group = "/".join(_segment(s, "GitLab group") for s in segments[:-1])
    extras = _parts(extra)
    ref, subdir = "HEAD", ""
    if extras and extras[0] in ("tree", "blob"):
        if len(extras) < 2:
            raise invalid("the GitLab URL is missing a branch, tag or commit")
        ref, subdir = extras[1], "/".join(extras[2:])
        if extras[0] == "blob" and subdir.rsplit("/", 1)[-1].lower() == "skill.md":
            subdir = subdir.rpartition("/")[0]
    elif extras and extras[0] == "archive":
        return Target("direct", parts.geturl(), registry=origin(parts.geturl()))
    url = (f"{regs.gitlab}/{quote(group, safe='/')}/{quote(repo)}/-/archive/"
           f"{quote(ref, safe='/')}/{quote(f'{repo}-{ref}', safe='')}.zip")
    return Target("gitlab", url, subdir=subdir, owner=group, repo=repo, ref=ref)
