"""The deterministic installer (decisions 8): no language model, one fixed plan.

Seed the bundle into the skill's directory as one tar stream; if the bundle has
`install.sh`, run it; else `requirements.txt` goes into the skill's own `.venv`; else
`package.json` gets `npm install`. Then verify (non-fatal notes), write the manifest
entry, read the env declarations (reference 7.4) and clean scratch before the snapshot.
On Docker the commands run as the sandbox user, who owns only the skill's directory
(decisions 14; a bundle's install-root.sh runs as root first where the operator allows
it); on E2B and Cube as root. Always under the config's network policy.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import zipfile
from dataclasses import dataclass
from typing import IO, Any

import yaml

SKILLS_ROOT = "/opt/weknora/tenant/skills"
MANIFEST = f"{SKILLS_ROOT}/.manifest.json"
ENV_DECLARATIONS = ".weknora/requirements.json"
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
ENV_NAME_MAX, ENV_CANDIDATES, ENV_KEPT, ENV_DESCRIPTION_MAX = 128, 200, 20, 500
RESERVED = frozenset({
    "PATH", "HOME", "USER", "SHELL", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH",
    "PYTHONHOME", "NODE_OPTIONS", "WEKNORA_SKILL_OUTPUT_DIR", "WEKNORA_SESSION_INPUT_DIR",
    "WEKNORA_SKILL_HISTORY_ROOT", "WEKNORA_SKILL_DIR", "NODE_PATH"})
RESERVED_PREFIX = "WEKNORA_SKILL_"
PIP = ".venv/bin/pip install --disable-pip-version-check --no-input --no-cache-dir"


def skill_dir(name: str) -> str:
    return f"{SKILLS_ROOT}/{name}"


def is_reserved(name: str) -> bool:
    return name in RESERVED or name.startswith(RESERVED_PREFIX)


@dataclass(frozen=True)
class Files:
    """The bundle's files by relative path (bundles are small: capped at upload)."""

    data: dict[str, bytes]

    @classmethod
    def from_zip(cls, archive: IO[bytes]) -> Files:
        with zipfile.ZipFile(archive) as bundle:
            return cls({info.filename: bundle.read(info) for info in bundle.infolist()
                        if not info.is_dir()})

    def tar(self, top: str = "", owner: int = 0) -> bytes:
        """One tar stream: directories and files mode 0755 (reference 7.2), owned by
        `owner`; under a directory entry `top` (owned likewise) when given."""
        out = io.BytesIO()

        def add(name: str, data: bytes | None = None) -> None:
            info = tarfile.TarInfo(f"{top}/{name}" if top and name else top or name)
            info.mode, info.uid, info.gid = 0o755, owner, owner
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))

        with tarfile.open(fileobj=out, mode="w") as archive:
            if top:
                add("")
            for directory in sorted({p.rsplit("/", 1)[0] for p in self.data if "/" in p}
                                    | _parents(self.data)):
                add(directory)
            for path in sorted(self.data):
                add(path, self.data[path])
        return out.getvalue()

    def mentions(self, name: str) -> bool:
        needle = name.encode()
        return any(needle in blob for blob in self.data.values())


def _parents(data: dict[str, bytes]) -> set[str]:
    found = set()
    for path in data:
        parts = path.split("/")[:-1]
        found |= {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return found


ROOT_STEP = "install-root.sh"


def commands(files: Files) -> list[str]:
    """The plan: every command, in order, run in the skill's directory (a root step,
    where there is one and it is allowed, runs before them)."""
    if "install.sh" in files.data:
        return ["./install.sh"]
    if "requirements.txt" in files.data:
        return ["python3 -m venv .venv", f"{PIP} -r requirements.txt"]
    if "package.json" in files.data:
        return ["npm install --no-audit --no-fund"]
    return []


# What each command of the plan does, as a person reads it (the API keeps the stage name
# `agent`, reference 7.3).
COMMAND_LABELS = {
    f"./{ROOT_STEP}": f"Running {ROOT_STEP} as root",
    "./install.sh": "Running install.sh",
    "python3 -m venv .venv": "Creating the Python environment",
    f"{PIP} -r requirements.txt": "Installing requirements",
    "npm install --no-audit --no-fund": "Installing npm packages",
}


def label(command: str | None) -> str:
    """The plan command `command` in words; any other command as "Running the install
    commands"."""
    return COMMAND_LABELS.get((command or "").strip(), "Running the install commands")


def reset_script(directory: str, keep_dir: bool = True) -> str:
    """Empty the skill's directory (`keep_dir`: a fresh root-owned one stays; else only
    its parent, for a seed that brings the directory with its owner)."""
    quoted = shlex.quote(directory)
    if not keep_dir:
        return f"rm -rf -- {quoted} && mkdir -p -- {shlex.quote(SKILLS_ROOT)}"
    return f"rm -rf -- {quoted} && mkdir -p -- {quoted} && chmod 755 {quoted}"


# Runs in the skill's directory as root; prints one note per line. Non-fatal by design.
VERIFY = r'''
import json, os, subprocess, sys
files = json.loads(os.environ["SANDLOT_VERIFY_FILES"])
for path in files:
    if not os.path.exists(path):
        print(f"declared file {path} is missing after the install")
for path in files:
    if path.endswith(".py") and os.path.exists(path):
        try:
            compile(open(path, "rb").read(), path, "exec")
        except (SyntaxError, ValueError) as exc:
            print(f"{path} does not parse: {exc.msg if hasattr(exc, 'msg') else exc}")
    elif path.endswith(".sh") and os.path.exists(path):
        done = subprocess.run(["sh", "-n", path], capture_output=True, text=True)
        if done.returncode:
            print(f"{path} does not parse: {done.stderr.strip()[-200:]}")
if os.path.exists("requirements.txt") and os.path.exists(".venv/bin/python"):
    code = ("import importlib.metadata as m, re, sys\n"
            "for line in open('requirements.txt'):\n"
            "    line = line.split('#')[0].strip()\n"
            "    if not line or line.startswith('-'): continue\n"
            "    name = re.split(r'[<>=!~;\\[ @]', line)[0]\n"
            "    try: m.distribution(name)\n"
            "    except m.PackageNotFoundError:\n"
            "        print(f'requirement {name} is not installed in .venv')\n")
    done = subprocess.run([".venv/bin/python", "-c", code], capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    if done.returncode:
        print("the skill's .venv could not check its packages: " + done.stderr.strip()[-200:])
'''

MANIFEST_SCRIPT = r'''
import json, os, sys
path, name = sys.argv[1], sys.argv[2]
entry = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
try:
    manifest = json.load(open(path))
except (OSError, ValueError):
    manifest = {}
if entry is None:
    manifest.pop(name, None)
else:
    manifest[name] = entry
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as out:
    json.dump(manifest, out, indent=2, sort_keys=True)
os.replace(path + ".tmp", path)
'''


def verify_command() -> str:
    return f"python3 -c {shlex.quote(VERIFY)}"


def manifest_command(name: str, entry: dict[str, Any] | None) -> str:
    args = [MANIFEST, name] + ([json.dumps(entry, sort_keys=True)] if entry is not None else [])
    return f"python3 -c {shlex.quote(MANIFEST_SCRIPT)} " + " ".join(shlex.quote(a) for a in args)


# Reference 7.2 step 16. Root has no capabilities in the sandbox, so what the sandbox user
# owns may stay; only the installer's scratch and caches matter for the image.
CLEANUP = ("rm -rf /tmp/* /tmp/.[!.]* /run/desktop /root/.cache /root/.npm 2>/dev/null; "
           "find /workspace -mindepth 1 -maxdepth 1 ! -name input ! -name output "
           "-exec rm -rf {} + 2>/dev/null; "
           "mkdir -p /workspace/input /workspace/output 2>/dev/null; true")


# What an install may change in the image (issue 22 item 4): its skill's directory and the
# manifest, and the scratch and caches CLEANUP empties before the commit. Their parent
# directories show as changed (or added, the first time) and are allowed as such.
SCRATCH = ("/tmp", "/run/desktop", "/root/.cache", "/root/.npm", "/workspace")
# The engine's own bind mount for the container's init (`--init`): listed by docker diff,
# never committed.
ENGINE_MOUNTS = ("/usr/sbin/docker-init",)


def outside_changes(changes: list[tuple[str, str]], name: str) -> list[str]:
    """The paths of `changes` (docker diff) an install of skill `name` may not touch; a
    directory listed only because something under it changed is not repeated."""
    owned = (skill_dir(name), MANIFEST, *SCRATCH, *ENGINE_MOUNTS)
    out = []
    for path, kind in changes:
        if any(path == root or path.startswith(root + "/") for root in owned):
            continue
        if kind != "deleted" and any(root.startswith(path + "/") for root in owned):
            continue  # a parent directory of what it may touch
        out.append((path, kind))
    return [p for p, kind in out if kind != "changed"
            or not any(other.startswith(p + "/") for other, _ in out)]


def declarations(raw_json: bytes | None, files: Files) -> list[dict[str, Any]] | None:
    """Reference 7.4: from `.weknora/requirements.json`, else SKILL.md frontmatter `env`;
    more than 200 candidates yield none, at most 20 kept; UPPER_SNAKE up to 128
    characters, trimmed; the name must occur literally in the bundle; reserved names
    dropped; a rejected entry costs only itself.

    None when there is no usable declaration (missing, unparseable, no `env` list, too
    many candidates, or every entry rejected): a reinstall then keeps what it had. An
    explicit empty list is a declaration of nothing."""
    candidates = _candidates(raw_json) if raw_json is not None else _frontmatter_env(files)
    if candidates is None or len(candidates) > ENV_CANDIDATES:
        return None
    kept: list[dict[str, Any]] = []
    for item in candidates:
        entry = _declared(item, files)
        if entry is not None and all(k["name"] != entry["name"] for k in kept):
            kept.append(entry)
            if len(kept) == ENV_KEPT:
                break
    return kept if kept or not candidates else None


def _declared(item: Any, files: Files) -> dict[str, Any] | None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    name = item["name"].strip()
    if not ENV_NAME.match(name) or len(name) > ENV_NAME_MAX or is_reserved(name):
        return None
    if not files.mentions(name):
        return None
    description = item.get("description")
    description = description.strip()[:ENV_DESCRIPTION_MAX] if isinstance(description, str) else ""
    return {"name": name, "required": bool(item.get("required")), "description": description}


def _candidates(raw: bytes) -> list[Any] | None:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(data, dict):
        data = next((data[k] for k in ("env", "envs", "env_vars") if data.get(k) is not None),
                    None)
    return data if isinstance(data, list) else None


def _frontmatter_env(files: Files) -> list[Any] | None:
    text = files.data.get("SKILL.md", b"").decode("utf-8", "replace")
    if not text.startswith("---"):
        return None
    head = text[3:].split("\n---", 1)[0]
    try:
        meta = yaml.safe_load(head)
    except yaml.YAMLError:
        return None
    env = meta.get("env") if isinstance(meta, dict) else None
    return env if isinstance(env, list) else None
