"""Capture (reference 8.4): what a skill run exported for its declared names.

The command is wrapped so that, when its shell exits, the values of the declared names
still unset in every layer are written (mode 600) to a directory named by a fresh nonce;
a second exec reads them back as hex and removes the directory. Names go into the shell
text only after matching the strict variable-name pattern, so a declaration cannot inject
shell code. A run that `exec`s away or is killed captures nothing, which is safe.
"""

from __future__ import annotations

import re
import secrets

from app.services.personal.values import NAME_RE

_ENTRY = re.compile(r"([A-Z_][A-Z0-9_]*):([0-9a-f\s]*);")


def capture_dir() -> str:
    return f"/tmp/.sandlot-capture-{secrets.token_hex(12)}"


def wrap(command: str, names: list[str], directory: str) -> str:
    """`command`, run as before, plus an EXIT trap saving the named variables' values."""
    safe = [n for n in names if NAME_RE.match(n)]
    if not safe:
        return command
    saves = "; ".join(
        f'if [ -n "${{{n}-}}" ]; then printf %s "${n}" > {directory}/{n}; fi' for n in safe)
    trap = (f"__sandlot_cap() {{ __sandlot_rc=$?; (umask 077; mkdir -p {directory} && "
            f"{{ {saves}; }}) 2>/dev/null; exit $__sandlot_rc; }}; trap __sandlot_cap EXIT\n")
    return trap + command + "\n"


def read_command(directory: str) -> str:
    return (f"cd {directory} 2>/dev/null || exit 0; for f in *; do [ -f \"$f\" ] || continue; "
            f"printf '%s:' \"$f\"; od -An -tx1 -v \"$f\"; printf ';\\n'; done; "
            f"cd /; rm -rf {directory}")


def parse(stdout: str) -> dict[str, str]:
    """NAME:<hex bytes>; entries -> {NAME: value}; undecodable values are skipped."""
    found = {}
    for name, hexes in _ENTRY.findall(stdout):
        try:
            found[name] = bytes.fromhex("".join(hexes.split())).decode()
        except (ValueError, UnicodeDecodeError):
            continue
    return found
