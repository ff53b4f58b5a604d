"""Fresh virtual environments, made with uv as README's commands make them, for
tests that install weir as a user would (another Ray, a built wheel)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def uv() -> str:
    found = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    assert found, "README's commands install uv into the virtual environment"
    return found


def pinned_to_this_environment(where: Path) -> Path:
    """A constraints file with the versions installed here, weir left out: a new
    environment then resolves to what uv's cache holds, and Ray matches this one's."""
    freeze = subprocess.run(
        [uv(), "pip", "freeze", "--python", sys.executable], capture_output=True, text=True, check=True
    )
    pins = [
        line
        for line in freeze.stdout.splitlines()
        if line and not line.startswith("-e ") and not line.startswith("weir")
    ]
    where.write_text("\n".join(pins) + "\n")
    return where


def new_venv(venv: Path, *install: str, timeout_s: float = 600) -> str:
    """A virtual environment at ``venv`` with ``install`` (uv pip install's
    arguments) installed, compiled to bytecode as README's commands install;
    returns its python."""
    subprocess.run([uv(), "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    run = subprocess.run(
        [uv(), "pip", "install", "-q", "--compile-bytecode", "--python", python, *install],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return python
