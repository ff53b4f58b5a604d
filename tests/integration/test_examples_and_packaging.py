"""Every example runs, and the benchmarks README quotes print their figures (tiny runs)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tests.benches import printed_by

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.ray
def test_main_example_runs_against_the_test_cluster(ray_cluster, tmp_path):
    env = {**os.environ, "RAY_ADDRESS": ray_cluster, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "keyed_sum.py"),
            "--records",
            "200000",
            "--output",
            str(tmp_path / "o"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "job keyed-sum: FINISHED" in out.stdout
    assert "final sums of 1000 keys match plain Python: True" in out.stdout


def _bench(ray_cluster: str, module: str, *args: str) -> str:
    """What ``python -m <module> <args>`` prints, run in this process, on the test
    session's cluster and driver. A driver of its own would cost seconds of CPU
    joining Ray, and every task of its jobs a fresh process (no process that ran
    another driver's code serves it); the figures themselves come from full runs.
    What a benchmark measures in processes of their own (bench.startup's new
    drivers) it still starts itself."""
    assert ray_cluster  # the session's cluster is up, and this process is its driver
    return printed_by(module, *args)


@pytest.mark.ray
def test_the_throughput_benchmark_prints_its_table_and_scaling_curve(ray_cluster):
    """A tiny run, so the benchmark README quotes keeps working (the figures come from full runs)."""
    stdout = _bench(
        ray_cluster,
        "bench.w1",
        *[
            "--records",
            "20000",
            "--latency-records",
            "2000",
            "--parallelism",
            "1",
            "2",
            "--repeat",
            "1",
            "--settle-s",
            "0",
        ],
    )
    assert "W1 keyed running sum, 20,000 records" in stdout
    assert "parallelism   1   1.00x" in stdout and "parallelism   2" in stdout
    assert "latency at 100,000 records/s, parallelism 2" in stdout


@pytest.mark.ray
def test_the_state_at_scale_benchmark_prints_its_ratios_and_times_a_restore(ray_cluster):
    """Tiny runs of the commands README and docs/benchmarks.md quote, on RocksDB with --restore and with --ttl."""
    args = ["--records", "20000", "--repeat", "1", "--settle-s", "0", "--backend", "rocksdb"]
    stdout = _bench(ray_cluster, "bench.state_scale", *args, "--keys", "100", "5000", "--restore")
    assert "5,000 keys, 1 s checkpoints against checkpoints off (whole execute()):" in stdout
    assert "5,000 keys against 100 keys, both with 1 s checkpoints" in stdout
    assert "restore of the latest checkpoint at 5,000 keys: whole execute()" in stdout
    stdout = _bench(ray_cluster, "bench.state_scale", *args, "--keys", "5000", "--ttl", "100")
    assert "5,000 keys, a ValueState with a TTL against one without (whole execute()):" in stdout


@pytest.mark.ray
@pytest.mark.parametrize(
    "command,expected",
    [
        (
            [
                "bench.startup",
                "--parallelism",
                "2",
                "--repeat",
                "1",
                "--settle-s",
                "0",
                "--new-drivers",
                "1",
                "--cold",
                "0",  # on the other worker: test_finding_the_cluster.py
            ],
            ["parallelism 2: execute() median", "new driver on a warm cluster, p=2: first execute() median"],
        ),
        (
            [
                "bench.cost",
                "--records",
                "50000",
                "--parallelism",
                "1",
                "2",
                "--side-by-side",
                "2",
                "--repeat",
                "1",
                "--settle-s",
                "0",
            ],
            ["parallelism 2: ", "2 jobs at parallelism 1 side by side: "],
        ),
        (
            [
                "bench.recovery",
                "--kills",
                "1",
                "--rapid-kills",
                "0",
                "--coordinator-kills",
                "1",
                "--rescales",
                "1",
            ],  # rapid: the same run, sooner kills
            [
                "kill -> first committed output of the new attempt: n=1",
                "of the recovered job: n=1",
                "client.rescale): n=1",
            ],
        ),
    ],
)
def test_the_scale_out_benchmarks_print_their_figures(ray_cluster, command, expected):
    """Tiny runs of the start-up, cost, and recovery/rescale benchmarks README quotes."""
    stdout = _bench(ray_cluster, *command)
    assert all(e in stdout for e in expected), stdout[-2000:]


def test_the_crowding_benchmark_prints_its_figures():
    """bench.crowding, which docs/benchmarks.md quotes beside bench.cost, needs no cluster."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.crowding",
            "--records",
            "100000",
            "--parallelism",
            "1",
            "2",
            "--layout",
            "pipelines",
            "keyed",
            "shared",
            "--repeat",
            "1",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for line in (
        "pipelines at 1 (2 busy processes",
        "pipelines at 2 (4 busy processes",
        "keyed at 2 (4 busy processes",
        "shared at 1 (1 busy processes",
        "shared at 2 (2 busy processes",
    ):
        assert line in out.stdout, out.stdout
