"""The layer contract in .importlinter holds, says what ARCHITECTURE.md says, and bites."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
EXPECTED_LAYERS = [
    "app.web | app.api | app.jobs | app.cli",
    "app.services",
    "app.models | app.backends | app.storage",
    "app.security",
]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True,
        timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
    )


def test_the_contract_states_the_architecture():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layers = config["importlinter:contract:layers"]
    assert layers["type"] == "layers"
    assert [line.strip() for line in layers["layers"].strip().splitlines()] == EXPECTED_LAYERS


def test_the_code_keeps_the_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


# (module to write or extend, the import it makes): each breaks one rule of the contract.
VIOLATIONS = {
    "service imports the web layer": ("app/services/_probe.py", "import app.web"),
    "security imports models": ("app/security/_probe.py", "import app.models"),
    "api imports web (independent siblings)": ("app/api/_probe.py", "import app.web"),
    "cli imports api (independent siblings)": ("app/cli.py", "import app.api"),
    "models import backends (independent siblings)": ("app/models/_probe.py",
                                                      "import app.backends"),
    "services import flask_login": ("app/services/_probe.py", "import flask_login"),
}


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_a_violation_breaks_the_contract(case, tmp_path):
    """On a scratch copy of app/, never the real tree."""
    shutil.copytree(ROOT / "app", tmp_path / "app",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    path, statement = VIOLATIONS[case]
    with open(tmp_path / path, "a") as handle:
        handle.write(f"\n{statement}  # probe\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, f"{case}: lint-imports passed:\n{result.stdout[-2000:]}"
    assert "BROKEN" in result.stdout
