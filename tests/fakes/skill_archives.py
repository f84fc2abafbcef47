"""Real skill archives built in the test: zip, tar, tar.gz and bare SKILL.md bytes."""

from __future__ import annotations

import io
import tarfile
import time
import zipfile


def skill_md(name: str = "demo-skill", description: str = "A demo skill",
             version: str | None = "1.0.0", body: str = "# Demo\n\nRun scripts/run.py.\n",
             ) -> bytes:
    lines = ["---", f"name: {name}", f"description: {description}"]
    if version is not None:
        lines.append(f"version: {version}")
    return ("\n".join([*lines, "---", body])).encode()


def skill_files(name: str = "demo-skill", version: str | None = "1.0.0") -> dict[str, bytes]:
    return {"SKILL.md": skill_md(name, version=version),
            "scripts/run.py": b"print('hello from the skill')\n",
            "assets/logo.png": PNG}


# A 1x1 transparent PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def make_zip(files: dict[str, bytes], prefix: str = "",
             compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in files.items():
            archive.writestr(prefix + name, data)
    return buffer.getvalue()


def zip_with_symlink(files: dict[str, bytes], link: str, target: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        info = zipfile.ZipInfo(link)
        info.create_system = 3
        info.external_attr = (0o120777 << 16)
        archive.writestr(info, target)
    return buffer.getvalue()


def make_tar(files: dict[str, bytes], prefix: str = "", gz: bool = False,
             mtime: float | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gz else "w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size, info.mtime, info.mode = len(data), mtime or time.time(), 0o755
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
