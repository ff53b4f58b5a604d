"""How a driver finds the Ray cluster on its machine: the one ``ray start``
recorded in ``<temp>/ray/ray_current_cluster``, and what happens when that
cluster is gone (Ray waited over three minutes for the address a crashed or
uncleanly stopped cluster left there, measured before weir checked that anything
listens there)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.benches import printed_by
from tests.integration.test_cli import weir_process
from tests.own_ray import own_ray_tmpdir

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gone_cluster_recorded() -> Iterator[dict[str, str]]:
    """The environment of a driver whose Ray temp dir names a cluster nobody listens for."""
    with own_ray_tmpdir() as own, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        (Path(own) / "ray").mkdir()
        (Path(own) / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
        yield {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": own}


def _driver(code: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    return run, time.monotonic() - started


def test_a_client_that_never_starts_a_cluster_says_there_is_none_at_once(gone_cluster_recorded):
    run, took = _driver("from weir.actors.cluster import ensure_ray; ensure_ray(start=False)", gone_cluster_recorded)
    assert run.returncode != 0
    assert "the Ray cluster recorded at 127.0.0.1:" in run.stderr and "is gone (nothing listens there)" in run.stderr, (
        run.stderr[-3000:]
    )
    assert "NoClusterError: no Ray cluster found on this machine (RAY_ADDRESS is unset)" in run.stderr, run.stderr[
        -3000:
    ]
    assert took < 30, f"it took {took:.1f} s"


def test_a_job_driver_starts_a_cluster_of_its_own_instead(gone_cluster_recorded):
    run, took = _driver(
        "from weir.actors.cluster import ensure_ray; ensure_ray(); import ray; print('joined', ray.is_initialized())",
        gone_cluster_recorded,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "joined True" in run.stdout and "Started a local Ray instance" in run.stderr, run.stdout + run.stderr[-3000:]
    assert took < 90, f"it took {took:.1f} s"


def test_ray_address_auto_asks_for_a_running_cluster_and_gets_a_clear_no(gone_cluster_recorded):
    run, took = _driver(
        "from weir.actors.cluster import ensure_ray; ensure_ray()", gone_cluster_recorded | {"RAY_ADDRESS": "auto"}
    )
    assert run.returncode != 0
    assert "no Ray cluster found on this machine, and RAY_ADDRESS=auto asks for a running one" in run.stderr, (
        run.stderr[-3000:]
    )
    assert took < 30, f"it took {took:.1f} s"


def test_a_driver_joins_the_cluster_ray_start_recorded():
    """With Ray's token authentication on (``ray start``'s default since 2.52), a
    driver that named the recorded address instead of "auto" was refused."""
    with own_ray_tmpdir() as own, socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
        s.close()  # a port of its own: the test session's cluster may hold 6379
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
        run, took = _driver(
            "from weir.actors.cluster import ensure_ray; ensure_ray(); import ray; "
            "print('joined', ray.get_runtime_context().gcs_address)",
            env,
        )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith(f":{port}"), run.stdout
    assert took < 60, f"it took {took:.1f} s"


def test_the_cold_start_benchmark_prints_its_figures():
    """bench.startup's cold start, which README quotes: a driver on a machine with
    no cluster starts Ray, then weir's processes (``warm_pool``), and its first job
    starts none. Here, on the worker without the session's cluster, beside the
    other drivers that start clusters of their own (the session's worker runs the
    benchmark's warm rows)."""
    stdout = printed_by("bench.startup", "--cold", "1", "--parallelism", "--new-drivers", "0")
    for line in (
        "cold start, p=2: Ray's start (ray.init) median",
        "then weir's processes (warm_pool) median",
        "which started 0 process(es)",  # the first job waits for none: they are up
    ):
        assert line in stdout, stdout[-2000:]


def test_commands_that_look_at_jobs_never_start_a_cluster():
    """Issue #16: `weir list` with no cluster reachable started an empty local one
    and reported no jobs. It fails at once, naming where it looked (three `weir`
    processes: in a process that joined Ray the command could not fail)."""
    started = time.monotonic()
    for command in (["list"], ["status", "some-job"], ["pool"]):
        r = weir_process("127.0.0.1:1", *command)
        assert r.returncode == 1, (command, r.stdout, r.stderr)
        assert "no Ray cluster found at 127.0.0.1:1" in r.stderr, r.stderr
    assert time.monotonic() - started < 60  # Ray alone waits minutes for an address that does not answer
