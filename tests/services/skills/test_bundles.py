"""Bundle validation (reference 6.3-6.4): every rejection with a clear message, zip bombs
refused from the central directory without inflating, and a reproducible normalised zip."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile

import pytest

from app.services.skills import bundles, manifest
from app.services.skills.bundles import normalize
from app.services.skills.limits import BoundedSpool, BundleTooLarge, max_bundle_mb
from app.services.skills.manifest import BundleInvalid
from tests.fakes.skill_archives import (
    make_tar,
    make_zip,
    skill_files,
    skill_md,
    zip_with_symlink,
)

MD = skill_md()


def bundle(data: bytes, kind: str = "zip", **kwargs):
    return normalize(io.BytesIO(data), kind=kind, **kwargs)


def refused(data: bytes, match: str, kind: str = "zip", **kwargs) -> str:
    with pytest.raises(BundleInvalid, match=match) as caught:
        bundle(data, kind, **kwargs)
    assert caught.value.status == 400 and caught.value.code == "skill_bundle_invalid"
    return caught.value.message


@pytest.fixture
def no_inflation(monkeypatch):
    """Fail the test if any zip entry is opened for reading."""
    opened = []
    real = zipfile.ZipFile.open

    def spy(self, name, mode="r", *args, **kwargs):
        if mode == "r":
            opened.append(name)
        return real(self, name, mode, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    return opened


# ---------------------------------------------------------------- accepted shapes

def test_root_and_wrapper_folder_uploads_give_the_same_bundle():
    flat = bundle(make_zip(skill_files()))
    wrapped = bundle(make_zip(skill_files(), prefix="demo-skill/"))
    assert flat.meta.name == "demo-skill" and flat.meta.version == "1.0.0"
    assert flat.meta.description == "A demo skill"
    assert flat.meta.instructions.startswith("# Demo")
    assert [p for p, _ in flat.files] == ["SKILL.md", "assets/logo.png", "scripts/run.py"]
    assert flat.sha256 == wrapped.sha256


def test_tar_and_tgz_repack_to_the_same_deterministic_zip():
    zipped = bundle(make_zip(skill_files()))
    tarred = bundle(make_tar(skill_files(), mtime=1), "tar")
    gzipped = bundle(make_tar(dict(reversed(skill_files().items())), mtime=2e9, gz=True), "gzip")
    assert zipped.sha256 == tarred.sha256 == gzipped.sha256
    with zipfile.ZipFile(gzipped.archive) as out:
        infos = out.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}


def test_the_sha_is_the_sha_of_the_stored_bytes():
    import hashlib

    result = bundle(make_zip(skill_files()))
    assert hashlib.sha256(result.archive.read()).hexdigest() == result.sha256


def test_a_single_skill_md_is_a_bundle():
    result = bundle(MD, "markdown")
    assert result.files == [("SKILL.md", len(MD))]


def test_remote_archives_may_nest_the_skill_and_carry_other_files():
    repo = {"README.md": b"repo", "skills/demo/SKILL.md": MD, "skills/demo/run.sh": b"echo",
            "docs/x.txt": b"x"}
    result = bundle(make_zip(repo, prefix="repo-main/"), remote=True)
    assert [p for p, _ in result.files] == ["SKILL.md", "run.sh"]


def test_a_subdir_selects_one_skill_of_a_monorepo():
    repo = {"skills/a/SKILL.md": skill_md("a"), "skills/b/SKILL.md": skill_md("b")}
    result = bundle(make_zip(repo, prefix="repo-abc123/"), remote=True, subdir="skills/b")
    assert result.meta.name == "b"
    refused(make_zip(repo), "no SKILL.md under 'skills/c'", remote=True, subdir="skills/c")


def test_a_root_skill_md_wins_and_nested_ones_are_plain_files():
    files = {**skill_files(), "examples/other/SKILL.md": skill_md("other")}
    assert bundle(make_zip(files)).meta.name == "demo-skill"


def test_finder_metadata_in_an_upload_is_ignored():
    files = {**skill_files(), "__MACOSX/._SKILL.md": b"\0\5\26\7"}
    assert bundle(make_zip(files)).meta.name == "demo-skill"


def test_version_text_is_kept_as_written():
    assert bundle(make_zip({"SKILL.md": skill_md(version="1.10")})).meta.version == "1.10"
    assert bundle(make_zip({"SKILL.md": skill_md(version=None)})).meta.version == ""


# ---------------------------------------------------------------- rejections

def test_traversal_is_refused():
    refused(make_zip({**skill_files(), "../evil.sh": b"x"}), r"escapes the archive root \(\.\.\)")
    refused(make_zip({**skill_files(), "scripts/../../evil": b"x"}), "escapes the archive root")


def test_absolute_paths_are_refused():
    refused(make_zip({**skill_files(), "/etc/cron.d/x": b"x"}), "is an absolute path")
    refused(make_tar({**skill_files(), "/tmp/x": b"x"}), "is an absolute path", "tar")


def test_symlinks_are_refused_in_zip_and_tar():
    refused(zip_with_symlink(skill_files(), "scripts/passwd", "/etc/passwd"), "is a symlink")
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in skill_files().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("scripts/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        archive.addfile(link)
    refused(buffer.getvalue(), "is a symlink", "tar")


@pytest.mark.parametrize("name", ["scripts/a\nb.py", "scripts/\x1b[31mred", "x\x7fy",
                                  "scripts\\win.py"])
def test_control_characters_and_backslashes_in_names_are_refused(name):
    refused(make_zip({**skill_files(), name: b"x"}), "control character|backslash")
    refused(make_tar({**skill_files(), name: b"x"}), "control character|backslash", "tar")


def renamed(archive: bytes, old: bytes, new: bytes) -> bytes:
    """`archive` with a stored name's bytes replaced (same length), as a hostile tool
    would write it; tar header checksums are recomputed so the header stays valid."""
    assert len(old) == len(new) and old in archive
    data = bytearray(archive.replace(old, new))
    for at in range(0, len(data) - 511, 512):
        header = data[at:at + 512]
        if header[257:262] == b"ustar" and new in header:
            header[148:156] = b" " * 8
            header[148:156] = b"%06o\0 " % sum(header)
            data[at:at + 512] = header
    return bytes(data)


def test_a_nul_in_a_zip_name_is_refused_not_cut():
    """zipfile cuts `scripts/a<NUL>b.py` to `scripts/a`; the rule must see the stored name."""
    archive = renamed(make_zip({**skill_files(), "scripts/aXb.py": b"x"}), b"aXb", b"a\0b")
    refused(archive, "control character")


def test_a_nul_in_a_tar_name_is_refused_not_cut():
    archive = renamed(make_tar({**skill_files(), "scripts/aXb.py": b"x"}), b"aXb", b"a\0b")
    refused(archive, "NUL", "tar")


@pytest.mark.parametrize("mark", ["\u202e", "\u202d", "\u2066", "\u2067", "\u2068",
                                  "\u2069", "\u200f", "\u061c"])
def test_bidirectional_controls_in_names_are_refused(mark):
    name = f"scripts/evil{mark}yp.sh"  # shows as a .py file on screen
    refused(make_zip({**skill_files(), name: b"x"}), "right-to-left|bidirectional")
    refused(make_tar({**skill_files(), name: b"x"}), "right-to-left|bidirectional", "tar")


def test_a_cyrillic_look_alike_is_never_taken_as_the_skill_md():
    lookalike = "SKILL.md".replace("S", "\u0405")  # CYRILLIC CAPITAL LETTER DZE
    files = {lookalike: MD, "README.md": b"x"}
    refused(make_zip(files), "no SKILL.md found")


def test_no_skill_md_is_refused():
    refused(make_zip({"README.md": b"x"}), "no SKILL.md found")


def test_two_skills_are_refused():
    message = refused(make_zip({"a/SKILL.md": skill_md("a"), "b/SKILL.md": skill_md("b")}),
                      "more than one skill")
    assert "a, b" in message


def test_an_upload_with_skill_md_too_deep_is_refused():
    refused(make_zip(skill_files(), prefix="x/y/"), "root or inside one top-level folder")


def test_an_upload_with_files_beside_the_skill_folder_is_refused():
    files = {f"demo/{k}": v for k, v in skill_files().items()} | {"stray.txt": b"x"}
    refused(make_zip(files), "outside the skill folder 'demo'")


def test_a_non_semver_version_is_refused():
    refused(make_zip({"SKILL.md": skill_md(version="banana")}), "'banana' is not semver")


@pytest.mark.parametrize("text,match", [
    (b"# no frontmatter\n", "must start with YAML frontmatter"),
    (b"---\nname: x\n", "not closed"),
    (b"---\nname: [unclosed\n---\n", "not valid YAML"),
    (b"---\n- a list\n---\n", "must be a mapping"),
    (b"---\ndescription: d\n---\n", "needs a name"),
    (b"---\nname: ok\n---\n", "needs a description"),
    (b"---\nslug: ../../etc\ndescription: d\n---\n", "must be ASCII letters"),
    (b"---\nname: x\ndescription: d\nversion: !!python/object/apply:os.system [id]\n---\n",
     "not valid YAML"),
    (b"\xff\xfe---\n", "not UTF-8"),
])
def test_skill_md_problems_are_named(text, match):
    refused(make_zip({"SKILL.md": text}), match)


def test_not_an_archive_is_refused():
    refused(b"PK\x03\x04 garbage", "not a readable zip archive")
    refused(b"\x1f\x8b garbage", "not a readable gzip stream", "gzip")


# ---------------------------------------------------------------- bombs and limits

def test_a_high_ratio_zip_bomb_is_refused_without_inflating(no_inflation):
    bomb = make_zip({"SKILL.md": MD, "data.bin": b"\0" * (20 * 1024 * 1024)})
    assert len(bomb) < 100_000
    refused(bomb, "compressed more than 200:1")
    assert no_inflation == []


def _forge_sizes(data: bytes, name: str, size: int) -> bytes:
    """Rewrite the uncompressed size of `name` in the central directory and local header."""
    out = bytearray(data)
    central = out.find(b"PK\x01\x02" + out[out.find(b"PK\x01\x02") + 4:][:0])
    while central >= 0:
        name_len = struct.unpack("<H", out[central + 28:central + 30])[0]
        if out[central + 46:central + 46 + name_len] == name.encode():
            out[central + 24:central + 28] = struct.pack("<I", size)
            local = struct.unpack("<I", out[central + 42:central + 46])[0]
            out[local + 22:local + 26] = struct.pack("<I", size)
        central = out.find(b"PK\x01\x02", central + 4)
    return bytes(out)


def test_a_huge_declared_size_is_refused_without_inflating(no_inflation):
    archive = make_zip({"SKILL.md": MD, "big.bin": b"abc"}, compression=zipfile.ZIP_STORED)
    refused(_forge_sizes(archive, "big.bin", 3_000_000_000), "larger than 32 MiB")
    assert no_inflation == []


def test_an_entry_holding_more_than_it_declares_is_refused():
    archive = make_zip({"SKILL.md": MD, "x.txt": b"abcdef" * 100},
                       compression=zipfile.ZIP_STORED)
    refused(_forge_sizes(archive, "x.txt", 10), "damaged|more bytes")


def test_entry_and_file_counts_are_capped(monkeypatch):
    monkeypatch.setattr(bundles, "MAX_ENTRIES", 3)
    refused(make_zip({**skill_files(), "a": b"", "b": b""}), "more than 3 entries")
    monkeypatch.setattr(bundles, "MAX_ENTRIES", 100)
    monkeypatch.setattr(bundles, "MAX_FILES", 2)
    refused(make_zip(skill_files()), "more than 2 files")


def test_a_tgz_that_unpacks_past_the_total_cap_is_refused(monkeypatch):
    monkeypatch.setattr(bundles, "MAX_TOTAL_BYTES", 1024 * 1024)
    data = make_tar({"SKILL.md": MD, "zeros": b"\0" * (3 * 1024 * 1024)}, gz=True)
    refused(data, "unpacks to more than", "gzip")


def test_validation_streams_a_large_entry_in_bounded_memory():
    import os

    payload = os.urandom(12 * 1024 * 1024)  # incompressible: passes the ratio check
    archive = make_zip({"SKILL.md": MD, "blob.bin": payload}, compression=zipfile.ZIP_STORED)
    source = io.BytesIO(archive)
    del payload, archive
    tracemalloc.start()
    result = normalize(source, kind="zip")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert dict(result.files)["blob.bin"] == 12 * 1024 * 1024
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes"


# ---------------------------------------------------------------- size settings

@pytest.mark.parametrize("bundle_mb,file_mb,expected", [
    (None, None, 256), (256, 50, 256), (10, 50, 50), (1000, 50, 512), (100, 600, 512),
    ("junk", 50, 256), (-5, 50, 256),
])
def test_the_bundle_limit_is_clamped(bundle_mb, file_mb, expected):
    config = {"MAX_SKILL_BUNDLE_SIZE_MB": bundle_mb, "MAX_FILE_SIZE_MB": file_mb}
    assert max_bundle_mb(config) == expected


def test_a_bounded_spool_refuses_past_its_limit():
    spool = BoundedSpool(limit=10, limit_mb=1)
    spool.write(b"0123456789")
    with pytest.raises(BundleTooLarge, match="cannot exceed 1 MB") as caught:
        spool.write(b"x")
    assert caught.value.status == 413 and caught.value.code == "payload_too_large"


def test_semver_matches_the_reference_pattern():
    for good in ("1.0", "1.2.3", "v1.2.3", "1.2.3-beta.1", "0.1.0+build"):
        assert manifest.is_semver(good) or good == "0.1.0+build"
    for bad in ("1", "banana", "1.x", "latest"):
        assert not manifest.is_semver(bad)


def test_a_nul_in_a_gnu_long_tar_name_is_refused_not_cut():
    import tarfile

    long_name = "scripts/" + "d" * 120 + "/aXb.py"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in {**skill_files(), long_name: b"x"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    refused(renamed(buffer.getvalue(), b"aXb", b"a\0b"), "NUL", "tar")
