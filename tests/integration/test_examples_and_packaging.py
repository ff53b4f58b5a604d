"""Every example runs; the cluster config is valid for `ray up`."""

from __future__ import annotations

import copy
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.ray
def test_main_example_runs_against_the_test_cluster(ray_cluster, tmp_path):
    env = {**os.environ, "RAY_ADDRESS": ray_cluster, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "keyed_sum.py"), "--records", "200000", "--output", str(tmp_path / "o")],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "job keyed-sum: FINISHED" in out.stdout
    assert "final sums of 1000 keys match plain Python: True" in out.stdout


def test_ray_cluster_yaml_passes_rays_own_validation():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    validate_config(prepare_config(copy.deepcopy(config)))  # what `ray up` does before it starts
    assert config["provider"]["type"] == "local"
    assert any("pip install" in c and "-e ~/weir" in c and ".venv" in c for c in config["setup_commands"])
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all(c.startswith(". ~/weir/.venv/bin/activate && ") for c in starts)  # the venv's ray and python
    assert all("RAY_AUTH_MODE=token" in c for c in config["head_start_ray_commands"][1:] + config["worker_start_ray_commands"][1:])
    # One token for every node, at the path Ray reads by default; made by the user before `ray up`.
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert "ray get-auth-token --generate" in (ROOT / "ray_cluster.yaml").read_text()


@pytest.mark.ray
def test_the_throughput_benchmark_prints_its_table_and_scaling_curve(ray_cluster):
    """A tiny run, so the benchmark README quotes keeps working (the figures come from full runs)."""
    env = {**os.environ, "RAY_ADDRESS": ray_cluster, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "bench.w1", "--records", "20000", "--latency-records", "2000", "--parallelism", "1", "2", "--repeat", "1", "--settle-s", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "W1 keyed running sum, 20,000 records" in out.stdout
    assert "parallelism   1   1.00x" in out.stdout and "parallelism   2" in out.stdout
    assert "latency at 100,000 records/s, parallelism 2" in out.stdout


@pytest.mark.ray
@pytest.mark.parametrize("command,expected", [
    (["bench.startup", "--parallelism", "1", "2", "--repeat", "1", "--settle-s", "0", "--new-drivers", "1", "--cold", "1"],
     ["parallelism 2: execute() median", "new driver on a warm cluster, p=2: first execute() median",
      "cold start, p=2: Ray's start (ray.init) median"]),
    (["bench.cost", "--records", "50000", "--parallelism", "1", "2", "--side-by-side", "2", "--repeat", "1", "--settle-s", "0"],
     ["parallelism 2: ", "2 jobs at parallelism 1 side by side: "]),
    (["bench.recovery", "--kills", "1", "--rapid-kills", "0", "--coordinator-kills", "1", "--rescales", "1"],  # rapid: the same run, sooner kills
     ["kill -> first committed output of the new attempt: n=1", "of the recovered job: n=1", "client.rescale): n=1"]),
])
def test_the_scale_out_benchmarks_print_their_figures(ray_cluster, command, expected):
    """Tiny runs of the start-up, cost, and recovery/rescale benchmarks README quotes."""
    env = {**os.environ, "RAY_ADDRESS": ray_cluster, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    assert all(e in out.stdout for e in expected), out.stdout[-2000:]


def test_the_crowding_benchmark_prints_its_figures():
    """bench.crowding, which docs/benchmarks.md quotes beside bench.cost, needs no cluster."""
    out = subprocess.run([sys.executable, "-m", "bench.crowding", "--records", "100000", "--parallelism", "1", "2",
                          "--layout", "pipelines", "keyed", "shared", "--repeat", "1"],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in ("pipelines at 1 (2 busy processes", "pipelines at 2 (4 busy processes", "keyed at 2 (4 busy processes",
                 "shared at 1 (1 busy processes", "shared at 2 (2 busy processes"):
        assert line in out.stdout, out.stdout


def test_the_license_file_is_the_one_pyproject_names():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
