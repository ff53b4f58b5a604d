"""The oldest Ray weir claims to run on (pyproject's lower bound) is tested, not
only named: a virtual environment with exactly that Ray runs README's main
example on a Ray cluster of its own. The newest in the range is what the rest of
the suite runs on."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


def _ray_range() -> tuple[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ray = next(d for d in deps if d.startswith("ray[default]"))
    m = re.fullmatch(r"ray\[default\]>=([\d.]+),<([\d.]+)", ray)
    assert m, f"pyproject names Ray as {ray!r}, not as a range this test knows how to check"
    return m.group(1), m.group(2)


def test_the_oldest_ray_in_the_claimed_range_runs_the_main_example(tmp_path):
    oldest, _ = _ray_range()
    uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    assert uv, "README's commands install uv into the virtual environment"
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run([uv, "pip", "install", "-q", "--python", python, "-e", str(ROOT), f"ray[default]=={oldest}"],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    version = subprocess.run([python, "-c", "import ray; print(ray.__version__)"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == oldest
    # A cluster of its own: the test session's runs the newest Ray, and a driver
    # must match its cluster. Ray keeps socket paths under its temp dir: short.
    own = tempfile.mkdtemp(prefix="wv", dir="/tmp")
    # RAY_ADDRESS=local: the example must not first try the session's cluster
    # ("auto" finds it, and Ray waited a minute before giving up on it).
    env = os.environ | {"RAY_ADDRESS": "local", "RAY_TMPDIR": own}
    try:
        run = subprocess.run([python, "-m", "examples.keyed_sum", "--records", "5000", "--parallelism", "1", "--output", str(tmp_path / "out")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(own, ignore_errors=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "job keyed-sum: FINISHED" in run.stdout and "final sums of 1000 keys match plain Python: True" in run.stdout, run.stdout[-3000:]
