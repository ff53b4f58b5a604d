"""The code keeps one style: ruff's lint rules and its formatter (settings in
pyproject.toml). By hand: ``ruff check .`` and ``ruff format .``."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_code_passes_ruffs_lint_rules():
    out = _ruff("check", "--output-format", "concise", ".")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_code_is_formatted_as_ruff_formats_it():
    out = _ruff("format", "--check", ".")
    assert out.returncode == 0, "run `ruff format .`:\n" + out.stdout[-4000:] + out.stderr[-2000:]
