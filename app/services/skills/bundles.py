"""Skill bundle validation and normalisation (reference 6.3-6.4).

Input is an archive on a file object (zip, tar, tar.gz, or a single SKILL.md); output is a
`Bundle`: the skill's metadata and a deterministic zip (sorted entries, fixed timestamps
and permissions, the skill directory at its root) in a temp file, whose SHA-256 is the
bundle's identity. The same skill files always give the same bytes and the same SHA.

Nothing is inflated before it is judged: the zip central directory (entry count, declared
sizes, compression ratio) is checked first, and every entry is then copied in bounded
chunks with its actual bytes counted against what it declared. Tar members are listed
from their headers over a size-capped stream; gzip is decompressed under the same cap.
"""

from __future__ import annotations

import gzip
import re
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from app.services.skills.archive_io import (
    CHUNK,
    MAX_HEADER_READ,
    BytesReader,
    CappedReader,
    copy_bounded,
    digest,
    opened,
    quote,
    read_capped,
    short,
)
from app.services.skills.limits import MiB
from app.services.skills.manifest import SkillMeta, invalid, parse_skill_md
from app.services.skills.names import confusable_warning, imitates

__all__ = ["Bundle", "normalize", "sniff"]

MAX_ENTRIES = 100_000  # entries in the raw archive (a repository zip holds more than the skill)
MAX_FILES = 20_000  # files kept as the skill itself
MAX_FILE_BYTES = 32 * MiB
MAX_TOTAL_BYTES = 512 * MiB
MAX_RATIO = 200  # declared size / compressed size, judged for entries above RATIO_FLOOR
RATIO_FLOOR = 1 * MiB
SKILL_MD_MAX = 1 * MiB
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644 << 16
# Deflate level of the stored zip. Fixed, so the bytes (and the SHA) are reproducible; 1 is
# several times faster than the default 6 and bundles are mostly small text or already
# compressed assets, where higher levels buy little.
DEFLATE_LEVEL = 1
IGNORED_UPLOAD_PREFIXES = ("__MACOSX/",)  # Finder's AppleDouble copies, not skill files
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Marks that reorder how a name is displayed ("evil\u202eyp.sh" shows as "evilhs.py").
BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass
class Bundle:
    meta: SkillMeta
    sha256: str
    size: int
    files: list[tuple[str, int]]
    archive: IO[bytes] = field(repr=False)
    # What the owner should know: frontmatter repairs, confusable file names.
    notes: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.archive.close()


@dataclass
class Member:
    path: str  # cleaned relative path
    kind: str  # file | dir | symlink | other
    size: int
    packed: int | None  # compressed size (zip only)
    encrypted: bool
    open: Callable[[], IO[bytes]] = field(repr=False)


# ---------------------------------------------------------------- entry points

def sniff(head: bytes) -> str | None:
    """zip, gzip, tar, markdown, or None, from an archive's first bytes."""
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head[257:262] == b"ustar":
        return "tar"
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"---"):
        return "markdown"
    return None


def normalize(source: IO[bytes], *, kind: str, subdir: str = "", remote: bool = False) -> Bundle:
    """Validate `source` (a `sniff` kind) and re-pack it as the deterministic skill zip.

    Uploads (`remote=False`) must hold SKILL.md at the root or in one top-level folder and
    nothing else beside it; remote archives may nest the skill deeper (or name it by
    `subdir`) and carry other files, which are dropped.
    """
    if kind == "markdown":
        raw = read_capped(source, SKILL_MD_MAX, "SKILL.md")
        return _pack({"SKILL.md": (len(raw), lambda: BytesReader(raw))}, parse_skill_md(raw))
    with tempfile.TemporaryDirectory(prefix="sandlot-bundle-") as scratch:
        if kind == "zip":
            members, archive = _zip_members(source), None
        elif kind in ("tar", "gzip"):
            archive = _tar_source(source, kind, scratch)
            members = _tar_members(archive)
        else:
            raise invalid("it is not a zip, tar or tar.gz archive")
        try:
            kept = _select(members, subdir, remote)
            skill_md = kept["SKILL.md"]
            meta = parse_skill_md(_read_member(skill_md, "SKILL.md", SKILL_MD_MAX))
            result = _pack({rel: (m.size, m.open) for rel, m in kept.items()}, meta)
            result.notes += [w for rel in sorted(kept) if (w := confusable_warning(rel))]
            return result
        finally:
            if archive is not None:
                archive.close()


# ---------------------------------------------------------------- zip

def _zip_members(source: IO[bytes]) -> list[Member]:
    declared = _declared_zip_entries(source)
    if declared > MAX_ENTRIES:
        raise invalid(f"the archive has more than {MAX_ENTRIES} entries")
    source.seek(0)
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
        raise invalid(f"it is not a readable zip archive ({short(exc)})") from None
    infos = archive.infolist()
    if len(infos) > MAX_ENTRIES:
        raise invalid(f"the archive has more than {MAX_ENTRIES} entries")
    members = []
    for info in infos:
        mode = info.external_attr >> 16
        kind = ("dir" if info.is_dir() else "symlink" if (mode & 0o170000) == 0o120000
                else "file")
        # orig_filename: the name as stored; `filename` is cut at a NUL byte.
        members.append(Member(_clean(info.orig_filename), kind, info.file_size,
                              info.compress_size,
                              bool(info.flag_bits & 0x1),
                              lambda info=info: archive.open(info)))
    return members


def _declared_zip_entries(source: IO[bytes]) -> int:
    """The entry count the end-of-central-directory record claims, read before zipfile
    builds an object per entry (a forged count must not cost memory)."""
    source.seek(0, 2)
    size = source.tell()
    tail_size = min(size, 22 + 65535 + 20)
    source.seek(size - tail_size)
    tail = source.read(tail_size)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        raise invalid("it is not a readable zip archive (no end of central directory)")
    total = struct.unpack("<H", tail[at + 10:at + 12])[0]
    locator = tail[at - 20:at] if at >= 20 else b""
    if total == 0xFFFF and locator.startswith(b"PK\x06\x07"):
        offset = struct.unpack("<Q", locator[8:16])[0]
        source.seek(offset)
        record = source.read(56)
        if record.startswith(b"PK\x06\x06") and len(record) == 56:
            total = struct.unpack("<Q", record[32:40])[0]
    return total


# ---------------------------------------------------------------- tar

def _tar_source(source: IO[bytes], kind: str, scratch: str) -> CappedReader:
    """A seekable, uncompressed tar: gzip is inflated under the total-size cap first."""
    source.seek(0)
    if kind == "tar":
        return CappedReader(source)
    plain = tempfile.TemporaryFile(dir=scratch)  # noqa: SIM115 (closed by the caller)
    cap = MAX_TOTAL_BYTES + 64 * MiB  # headers and padding on top of the content cap
    inflated = 0
    try:
        with gzip.GzipFile(fileobj=source, mode="rb") as unzipped:
            while chunk := unzipped.read(CHUNK):
                inflated += len(chunk)
                if inflated > cap:
                    raise invalid("the archive unpacks to more than 512 MiB")
                plain.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        plain.close()
        raise invalid(f"it is not a readable gzip stream ({short(exc)})") from None
    except BaseException:
        plain.close()
        raise
    plain.seek(0)
    return CappedReader(plain)


def _tar_members(source: CappedReader) -> list[Member]:
    import tarfile

    try:
        archive = tarfile.open(fileobj=source, mode="r:")  # noqa: SIM115 (lives with source)
        members, total = [], 0
        while (info := archive.next()) is not None:
            if len(members) >= MAX_ENTRIES:
                raise invalid(f"the archive has more than {MAX_ENTRIES} entries")
            total += max(info.size, 0)
            if total > MAX_TOTAL_BYTES:
                raise invalid("the archive unpacks to more than 512 MiB")
            kind = ("file" if info.isreg() else "dir" if info.isdir()
                    else "symlink" if info.issym() or info.islnk() else "other")
            if _stored_name_has_nul(source, info):
                raise invalid(f"entry {quote(info.name)}... has a NUL byte in its stored name")
            members.append(Member(_clean(info.name), kind, info.size, None, False,
                                  lambda info=info: archive.extractfile(info)))
    except tarfile.TarError as exc:
        raise invalid(f"it is not a readable tar archive ({short(exc)})") from None
    return members


def _stored_name_has_nul(source: CappedReader, info) -> bool:
    """Whether the member's header stores a name with a NUL inside it: tarfile cuts a name
    at the first NUL, so `a<NUL>b.py` would silently become `a`. A NUL is only padding at
    the end of the name field (and of a GNU long-name block)."""
    back = source.tell()
    try:
        source.seek(info.offset)  # the first header: a GNU long name or pax record, or itself
        first = source.read(512)
        fields = []
        if first[156:157] == b"L":  # GNU long name: the name is the data that follows
            size = int(first[124:136].strip(b"\0 ") or b"0", 8)
            fields.append(source.read(min(size, MAX_HEADER_READ)))
        source.seek(info.offset_data - 512)  # the member's own header
        header = source.read(512)
        fields.append(header[0:100])
        if header[257:265] == b"ustar\x0000":  # POSIX: the prefix holds the leading dirs
            fields.append(header[345:500])
        return any(b"\0" in field.rstrip(b"\0") for field in fields)
    except ValueError:
        return False  # a size tarfile accepted but we cannot parse: tarfile judged it
    finally:
        source.seek(back)


# ---------------------------------------------------------------- selection

def _clean(name: str) -> str:
    """The entry's relative path; traversal and absolute paths are refused for every entry."""
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise invalid(f"entry {quote(name)} is an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise invalid(f"entry {quote(name)} escapes the archive root (..)")
    return "/".join(parts)


def _select(members: list[Member], subdir: str, remote: bool) -> dict[str, Member]:
    """The skill's files by path relative to the directory that holds its SKILL.md."""
    if not remote:
        members = [m for m in members if not m.path.startswith(IGNORED_UPLOAD_PREFIXES)
                   and m.path + "/" not in IGNORED_UPLOAD_PREFIXES]
    root = _skill_root([m.path for m in members if m.kind != "dir" and m.path],
                       _clean(subdir.strip()) if subdir else "", remote)
    prefix = f"{root}/" if root else ""
    kept: dict[str, Member] = {}
    total = 0
    for member in members:
        if member.kind == "dir" or not member.path:
            continue
        if not member.path.startswith(prefix):
            if remote:
                continue
            raise invalid(f"entry {quote(member.path)} is outside the skill folder "
                          f"{root!r}; put everything in one folder, or at the root")
        rel = member.path[len(prefix):]
        _check_kept(member, rel)
        if rel in kept:
            raise invalid(f"entry {quote(rel)} appears more than once")
        kept[rel] = member
        total += member.size
        if len(kept) > MAX_FILES:
            raise invalid(f"the skill holds more than {MAX_FILES} files")
        if total > MAX_TOTAL_BYTES:
            raise invalid("the skill's files add up to more than 512 MiB")
    return kept


def _skill_root(paths: list[str], subdir: str, remote: bool) -> str:
    if not subdir and "SKILL.md" in paths:
        return ""  # a SKILL.md at the root is the skill; nested ones are just its files
    roots, deeper = set(), []
    for path in paths:
        if path.rsplit("/", 1)[-1] != "SKILL.md" or "/" not in path:
            continue
        directory = path.rsplit("/", 1)[0]
        if subdir:
            if directory == subdir or directory.endswith(f"/{subdir}"):
                roots.add(directory)
        elif remote or "/" not in directory:
            roots.add(directory)
        else:
            deeper.append(directory)
    if len(roots) > 1:
        shown = ", ".join(sorted(roots)[:5])
        raise invalid(f"the archive holds more than one skill ({shown}); "
                      "name one folder with a URL path, or upload one skill at a time")
    if not roots:
        if subdir:
            raise invalid(f"no SKILL.md under {subdir!r}")
        if deeper:
            raise invalid("SKILL.md must be at the archive root or inside one top-level "
                          f"folder (found it in {sorted(deeper)[0]!r})")
        lookalike = next((p for p in sorted(paths)
                          if imitates(p.rsplit("/", 1)[-1], "SKILL.md")), None)
        if lookalike:
            raise invalid(f"no SKILL.md found ({quote(lookalike)} only looks like SKILL.md: "
                          "it uses letters from another script)")
        raise invalid("no SKILL.md found")
    return roots.pop()


def _check_kept(member: Member, rel: str) -> None:
    name = quote(rel)
    if member.kind == "symlink":
        raise invalid(f"entry {name} is a symlink; bundles may hold regular files only")
    if member.kind != "file":
        raise invalid(f"entry {name} is not a regular file")
    if CONTROL.search(rel):
        raise invalid(f"entry {name} has a control character in its name")
    if BIDI.search(rel):
        raise invalid(f"entry {name} has a right-to-left or other bidirectional control in "
                      "its name, which changes how the name is displayed")
    if "\\" in rel:
        raise invalid(f"entry {name} has a backslash in its name")
    if member.encrypted:
        raise invalid(f"entry {name} is encrypted")
    if member.size > MAX_FILE_BYTES:
        raise invalid(f"entry {name} is larger than 32 MiB")
    if member.packed is not None and member.size > RATIO_FLOOR and (
            member.packed <= 0 or member.size / member.packed > MAX_RATIO):
        raise invalid(f"entry {name} is compressed more than {MAX_RATIO}:1; refusing what "
                      "looks like a zip bomb")


# ---------------------------------------------------------------- output

def _pack(files: dict[str, tuple[int, Callable[[], IO[bytes]]]], meta: SkillMeta) -> Bundle:
    """The deterministic zip: sorted entries, fixed time and mode, each copy bounded."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 (owned by the Bundle)
    listing = []
    try:
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as target:
            for rel in sorted(files):
                declared, opener = files[rel]
                info = zipfile.ZipInfo(rel, date_time=FIXED_TIME)
                info.compress_type, info.create_system = zipfile.ZIP_DEFLATED, 3
                info.external_attr, info.file_size = FILE_MODE, declared
                info._compresslevel = DEFLATE_LEVEL  # ZipInfo has no public setter (3.11)
                with opened(opener, rel) as src, target.open(info, "w") as dst:
                    listing.append((rel, copy_bounded(src, dst, min(declared, MAX_FILE_BYTES),
                                                       rel)))
        sha, size = digest(out)
    except BaseException:
        out.close()
        raise
    return Bundle(meta, sha, size, listing, out, list(meta.notes))


def _read_member(member: Member, what: str, limit: int) -> bytes:
    if member.size > limit:
        raise invalid(f"{what} is larger than {limit // MiB} MiB")
    with opened(member.open, what) as handle:
        return read_capped(handle, limit, what)
