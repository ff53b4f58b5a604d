"""The oldest Ray weir claims to run on (pyproject's lower bound) is tested, not
only named: a virtual environment with exactly that Ray runs README's main
example on a Ray cluster of its own. The newest in the range is what the rest of
the suite runs on."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

from tests.own_ray import own_ray_tmpdir
from tests.venvs import new_venv

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


def _ray_range() -> tuple[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ray = next(d for d in deps if d.startswith("ray[default]"))
    m = re.fullmatch(r"ray\[default\]>=([\d.]+),<([\d.]+)", ray)
    assert m, f"pyproject names Ray as {ray!r}, not as a range this test knows how to check"
    return m.group(1), m.group(2)


@pytest.fixture(scope="module")
def oldest_ray(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A virtual environment with weir and the oldest Ray of the range: its python, and that version."""
    oldest, _ = _ray_range()
    python = new_venv(tmp_path_factory.mktemp("oldest-ray") / "venv", "-e", str(ROOT), f"ray[default]=={oldest}")
    version = subprocess.run(
        [python, "-c", "import ray; print(ray.__version__)"], capture_output=True, text=True, check=True
    )
    assert version.stdout.strip() == oldest
    return python, oldest


def test_the_oldest_ray_in_the_claimed_range_runs_the_main_example(oldest_ray, tmp_path):
    python, _ = oldest_ray
    # A cluster of its own: the test session's runs the newest Ray, and a driver
    # must match its cluster. RAY_ADDRESS=local: the example must not try the
    # session's cluster ("auto" finds it, and weir refuses a driver of another
    # Ray: the test below).
    with own_ray_tmpdir() as own:
        run = subprocess.run(
            [
                python,
                "-m",
                "examples.keyed_sum",
                "--records",
                "5000",
                "--parallelism",
                "1",
                "--output",
                str(tmp_path / "out"),
            ],
            cwd=ROOT,
            env=os.environ | {"RAY_ADDRESS": "local", "RAY_TMPDIR": own},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (
        "job keyed-sum: FINISHED" in run.stdout and "final sums of 1000 keys match plain Python: True" in run.stdout
    ), run.stdout[-3000:]


def test_a_driver_on_another_ray_than_the_machines_cluster_fails_at_once_naming_both_versions(oldest_ray):
    """A driver on the oldest Ray beside a cluster of the newest: Ray itself
    retried for about 40 s and ended with a bare ConnectionError (measured
    before weir compared builds first)."""
    import ray

    python, oldest = oldest_ray
    with socket.socket() as s:  # a port of its own: the test session's cluster may hold 6379
        s.bind(("", 0))
        port = s.getsockname()[1]
    with own_ray_tmpdir() as own:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": own}
        subprocess.run(
            [
                str(Path(sys.executable).parent / "ray"),
                "start",
                "--head",
                f"--port={port}",
                "--num-cpus=0",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=180,
        )
        started = time.monotonic()
        run = subprocess.run(
            [python, "-c", "from weir.actors.cluster import ensure_ray; ensure_ray()"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.monotonic() - started
    assert run.returncode != 0
    assert (
        "RayVersionMismatchError: the Ray cluster at " in run.stderr
        and f":{port} runs Ray {ray.__version__}, and this driver runs Ray {oldest}" in run.stderr
        and f'uv pip install "ray[default]=={ray.__version__}"' in run.stderr
    ), run.stderr[-3000:]
    assert took < 20, f"the driver took {took:.1f} s to say so"
