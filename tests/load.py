"""Load that tests and benchmarks put on this machine themselves."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_cores() -> Iterator[None]:
    """Every core of the machine kept busy (a loaded CI host) for the block, then freed."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
