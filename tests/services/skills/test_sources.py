"""Skill sources (reference 6.2): every form parsed to one target, then fetched for real from
local fake registries and code hosts serving archives built here."""

from __future__ import annotations

import socket

import pytest

from app.security.safe_http import SafeHTTPClient
from app.services.skills import fetching
from app.services.skills.bundles import normalize
from app.services.skills.limits import BundleTooLarge
from app.services.skills.sources import MAX_HOPS, Registries, SourceInvalid, parse
from tests.fakes import skill_registry
from tests.fakes.skill_archives import make_tar, make_zip, skill_files, skill_md
from tests.fakes.skill_registry import Sites

REGS = Registries("https://clawhub.ai", "https://skillhub.cn", "https://api.skillhub.cn",
                  "https://skills.sh", "https://github.com", "https://codeload.github.com",
                  "https://api.github.com", "https://gitlab.com")
CODELOAD = "https://codeload.github.com"
sites = skill_registry.sites  # the fixture


@pytest.mark.parametrize("source,kind,url,subdir", [
    ("@alice/pdf-tools", "registry",
     "https://clawhub.ai/api/v1/download?slug=pdf-tools&ownerHandle=alice", ""),
    ("@alice/pdf-tools@1.2.0", "registry",
     "https://clawhub.ai/api/v1/download?slug=pdf-tools&ownerHandle=alice&version=1.2.0", ""),
    ("pdf-tools", "registry", "https://clawhub.ai/api/v1/download?slug=pdf-tools", ""),
    ("pdf-tools@latest", "registry", "https://clawhub.ai/api/v1/download?slug=pdf-tools", ""),
    ("skills-sh:Vercel/Agent-Skills/react-best", "skills_sh",
     "https://clawhub.ai/api/v1/skills/react-best/install?reference="
     "skills-sh%3Avercel%2Fagent-skills%2Freact-best", ""),
    ("skills-sh/o/r/s", "skills_sh",
     "https://clawhub.ai/api/v1/skills/s/install?reference=skills-sh%3Ao%2Fr%2Fs", ""),
    ("https://skills.sh/o/r", "github", f"{CODELOAD}/o/r/zip/HEAD", ""),
    ("https://skills.sh/o/r/s", "skills_sh",
     "https://clawhub.ai/api/v1/skills/s/install?reference=skills-sh%3Ao%2Fr%2Fs", ""),
    ("https://github.com/o/r", "github", f"{CODELOAD}/o/r/zip/HEAD", ""),
    ("https://github.com/o/r.git", "github", f"{CODELOAD}/o/r/zip/HEAD", ""),
    ("https://github.com/o/r/tree/main/skills/pdf", "github", f"{CODELOAD}/o/r/zip/main",
     "skills/pdf"),
    ("https://github.com/o/r/blob/v2/skills/pdf/SKILL.md", "github", f"{CODELOAD}/o/r/zip/v2",
     "skills/pdf"),
    ("https://github.com/o/r/blob/main/SKILL.md", "github", f"{CODELOAD}/o/r/zip/main", ""),
    ("https://github.com/o/r/archive/refs/heads/main.zip", "direct",
     "https://github.com/o/r/archive/refs/heads/main.zip", ""),
    ("https://github.com/o/r/releases/tag/v1.0.0", "github", f"{CODELOAD}/o/r/zip/v1.0.0", ""),
    ("https://github.com/o/r/releases/download/v1/skill.zip", "direct",
     "https://github.com/o/r/releases/download/v1/skill.zip", ""),
    ("https://github.com/o/r/releases/latest", "github_release",
     "https://api.github.com/repos/o/r/releases/latest", ""),
    ("https://gitlab.com/g/sub/proj", "gitlab",
     "https://gitlab.com/g/sub/proj/-/archive/HEAD/proj-HEAD.zip", ""),
    ("https://gitlab.com/g/proj/-/tree/dev/skills/x", "gitlab",
     "https://gitlab.com/g/proj/-/archive/dev/proj-dev.zip", "skills/x"),
    ("https://gitlab.com/g/proj/-/blob/dev/skills/x/SKILL.md", "gitlab",
     "https://gitlab.com/g/proj/-/archive/dev/proj-dev.zip", "skills/x"),
    ("https://gitlab.com/g/proj/-/archive/v1/proj-v1.tar.gz", "direct",
     "https://gitlab.com/g/proj/-/archive/v1/proj-v1.tar.gz", ""),
    ("https://clawhub.ai/alice/pdf-tools", "registry",
     "https://clawhub.ai/api/v1/download?slug=pdf-tools&ownerHandle=alice", ""),
    ("https://www.clawhub.com/skills/pdf-tools?version=2.0.0", "registry",
     "https://clawhub.ai/api/v1/download?slug=pdf-tools&version=2.0.0", ""),
    ("https://clawhub.ai/skills-sh/o/r/s", "skills_sh",
     "https://clawhub.ai/api/v1/skills/s/install?reference=skills-sh%3Ao%2Fr%2Fs", ""),
    ("https://skillhub.cn/skills/acme/pdf-tools", "registry",
     "https://api.skillhub.cn/api/v1/download?slug=pdf-tools", ""),
    ("https://files.example.com/skills/pdf.zip", "direct",
     "https://files.example.com/skills/pdf.zip", ""),
    ("https://files.example.com/pdf.tar.gz", "direct", "https://files.example.com/pdf.tar.gz", ""),
    ("https://files.example.com/SKILL.md", "direct", "https://files.example.com/SKILL.md", ""),
    ("https://hub.example.org/alice/pdf-tools", "registry",
     "https://hub.example.org/api/v1/download?slug=alice%2Fpdf-tools", ""),
    ("  https://github.com/o/r/  ", "github", f"{CODELOAD}/o/r/zip/HEAD", ""),
])
def test_every_source_form_parses_to_one_target(source, kind, url, subdir):
    target = parse(source, REGS)
    assert (target.kind, target.url, target.subdir) == (kind, url, subdir)


def test_a_bare_owner_slug_is_refused_with_the_way_out():
    with pytest.raises(SourceInvalid) as caught:
        parse("alice/pdf-tools", REGS)
    assert caught.value.status == 400 and caught.value.code == "skill_source_invalid"
    assert "ambiguous" in caught.value.message and "@alice/pdf-tools" in caught.value.message


@pytest.mark.parametrize("source,match", [
    ("", "source is required"),
    ("   ", "source is required"),
    ("@alice/pdf@banana", "must look like semver"),
    ("ftp://example.com/x.zip", "only http"),
    ("skills-sh:o/r", "owner/repo/slug"),
    ("https://github.com/o", "owner/repo"),
    ("https://github.com/o/r/tree", "missing a branch"),
    ("two words", "one line without spaces"),
    ("@a/b/c", "not owner/slug"),
])
def test_bad_sources_are_refused_before_any_fetch(source, match):
    with pytest.raises(SourceInvalid, match=match):
        parse(source, REGS)


# ---------------------------------------------------------------- fetching from fakes

def fetch(app, source: str, limit_mb: int = 5):
    regs = Registries.from_config(app.config)
    fetched = fetching.fetch(source, regs, SafeHTTPClient(allow_private=True), limit_mb)
    try:
        return normalize(fetched.body, kind=fetched.kind, subdir=fetched.subdir, remote=True)
    finally:
        fetched.close()


def repo_zip(name: str = "demo-skill", wrapper: str = "repo-0123abc/") -> bytes:
    files = {"README.md": b"# repo\n", **{f"skills/{name}/{k}": v
                                         for k, v in skill_files(name).items()}}
    return make_zip(files, prefix=wrapper)


def test_clawhub_owner_slug_and_version(app, sites: Sites):
    sites.clawhub.add("/api/v1/download?slug=pdf&ownerHandle=alice&version=1.2.0",
                      make_zip(skill_files("pdf")))
    assert fetch(app, "@alice/pdf@1.2.0").meta.name == "pdf"
    assert sites.clawhub.requests[0]["headers"]["User-Agent"].startswith("Sandlot")


def test_github_tree_url_fetches_codeload_zip_and_picks_the_subdir(app, sites: Sites):
    sites.codeload.add("/o/r/zip/main", repo_zip())
    result = fetch(app, f"{sites.github.url}/o/r/tree/main/skills/demo-skill")
    assert result.meta.name == "demo-skill"
    assert [p for p, _ in result.files] == ["SKILL.md", "assets/logo.png", "scripts/run.py"]


def test_github_archive_url_follows_the_redirect_to_codeload(app, sites: Sites):
    sites.codeload.add("/o/r/tar.gz/refs/heads/main",
                       make_tar({"SKILL.md": skill_md("tarred")}, prefix="r-main/", gz=True),
                       content_type="application/x-gzip")
    sites.github.redirect("/o/r/archive/refs/heads/main.tar.gz",
                          sites.codeload.url + "/o/r/tar.gz/refs/heads/main")
    assert fetch(app, f"{sites.github.url}/o/r/archive/refs/heads/main.tar.gz").meta.name == \
        "tarred"


def test_github_latest_release_asks_the_api_for_the_tag(app, sites: Sites):
    sites.github_api.add_json("/repos/o/r/releases/latest", {"tag_name": "v3.0.0"})
    sites.codeload.add("/o/r/zip/v3.0.0", make_zip(skill_files("released"), prefix="r-3/"))
    assert fetch(app, f"{sites.github.url}/o/r/releases/latest").meta.name == "released"


def test_gitlab_tree_url(app, sites: Sites):
    sites.gitlab.add("/g/proj/-/archive/dev/proj-dev.zip", repo_zip("lab", "proj-dev/"))
    assert fetch(app, f"{sites.gitlab.url}/g/proj/-/tree/dev/skills/lab").meta.name == "lab"


def test_skills_sh_reference_resolves_through_the_clawhub_handoff(app, sites: Sites):
    sites.clawhub.add_json(
        "/api/v1/skills/demo-skill/install?reference=skills-sh%3Ao%2Fr%2Fdemo-skill",
        {"ok": True, "installKind": "github", "repo": "o/r", "commit": "abc123",
         "path": "skills/demo-skill"})
    sites.codeload.add("/o/r/zip/abc123", repo_zip())
    assert fetch(app, "skills-sh:o/r/demo-skill").meta.name == "demo-skill"


def test_skills_sh_page_url(app, sites: Sites):
    sites.clawhub.add_json("/api/v1/skills/s/install?reference=skills-sh%3Ao%2Fr%2Fs",
                           {"github": {"repo": "o/r", "path": "skills/demo-skill",
                                       "commit": "c0ffee"}})
    sites.codeload.add("/o/r/zip/c0ffee", repo_zip())
    assert fetch(app, f"{sites.skills_sh.url}/o/r/s").meta.name == "demo-skill"


def test_skillhub_page(app, sites: Sites):
    sites.skillhub_api.add("/api/v1/download?slug=pdf-tools", make_zip(skill_files("pdf-tools")))
    assert fetch(app, f"{sites.skillhub.url}/skills/acme/pdf-tools").meta.name == "pdf-tools"


def test_self_hosted_registry_hands_off_to_a_relative_archive(app, sites: Sites):
    sites.other.add_json("/api/v1/download?slug=team%2Fpdf",
                         {"ok": True, "archive": {"version": "1.0.0",
                                                  "downloadUrl": "/files/pdf.zip"}})
    sites.other.add("/files/pdf.zip", make_zip(skill_files("team-pdf")))
    assert fetch(app, f"{sites.other.url}/team/pdf").meta.name == "team-pdf"


@pytest.mark.parametrize("path,body,kind", [
    ("/x/skill.zip", "zip", "zip"), ("/x/skill.tgz", "tgz", "gzip"),
    ("/x/skill.tar", "tar", "tar"), ("/x/SKILL.md", "md", "markdown"),
])
def test_direct_archive_and_markdown_urls(app, sites: Sites, path, body, kind):
    data = {"zip": make_zip(skill_files("direct")),
            "tgz": make_tar(skill_files("direct"), gz=True),
            "tar": make_tar(skill_files("direct")), "md": skill_md("direct")}[body]
    sites.other.add(path, data, content_type="application/octet-stream")
    assert fetch(app, sites.other.url + path).meta.name == "direct"


def test_a_registry_saying_ok_false_is_a_400_with_its_message(app, sites: Sites):
    sites.clawhub.add_json("/api/v1/download?slug=gone",
                           {"ok": False, "message": "This skill was removed for malware."})
    with pytest.raises(SourceInvalid, match="refused: This skill was removed for malware"):
        fetch(app, "gone")


def test_handoffs_stop_after_three_hops(app, sites: Sites):
    for hop in range(MAX_HOPS + 2):  # hop0 -> hop1 -> hop2 -> ... never an archive
        sites.other.add_json(f"/api/v1/download?slug=hop{hop}",
                             {"ok": True, "downloadUrl": f"/api/v1/download?slug=hop{hop + 1}"})
    with pytest.raises(SourceInvalid, match="more than 3 times"):
        fetch(app, f"{sites.other.url}/hop0")
    assert len(sites.other.requests) == MAX_HOPS + 1


def test_an_unreachable_registry_is_a_clear_400(app, sites: Sites, monkeypatch):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    monkeypatch.setitem(app.config, "CLAWHUB_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
    closed.close()
    with pytest.raises(SourceInvalid, match="could not be fetched.*connection refused"):
        fetch(app, "anything")


def test_a_registry_error_status_is_echoed_truncated(app, sites: Sites):
    sites.clawhub.add("/api/v1/download?slug=nope", b"E" * 5000, content_type="text/plain")
    sites.clawhub.routes["/api/v1/download?slug=nope"].status = 404
    with pytest.raises(SourceInvalid, match="HTTP 404") as caught:
        fetch(app, "nope")
    assert len(caught.value.message) < 300


def test_html_is_not_a_skill(app, sites: Sites):
    sites.other.add("/api/v1/download/page", b"<html>hi</html>", content_type="text/html")
    with pytest.raises(SourceInvalid, match="did not return a skill archive"):
        fetch(app, f"{sites.other.url}/api/v1/download/page")


def test_a_remote_archive_over_the_limit_is_refused(app, sites: Sites):
    import os

    sites.other.add("/big.zip", make_zip({"SKILL.md": skill_md(), "x": os.urandom(2 << 20)}),
                    chunked=True)
    with pytest.raises(BundleTooLarge, match="cannot exceed 1 MB"):
        fetch(app, f"{sites.other.url}/big.zip", limit_mb=1)
