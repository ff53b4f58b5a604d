"""weir on Ray clusters of more than one node, simulated on this machine: a node
lost while a job runs, and a job submitted with ``ray job submit`` to a cluster
started by ray_cluster.yaml's head command from a home holding only the token. Each cluster is separate from the test
session's (own processes, own temp dir) and is torn down at the end."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

from weir.actors.cluster import java_env

pytestmark = pytest.mark.ray

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The `ray` command of the Python running the tests (a virtual environment's, not PATH's).
RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # never the test session's cluster
    # Ray's job CLI sends the cluster's token (~/.ray/auth_token) only in token mode.
    return {**env, **java_env(), "RAY_AUTH_MODE": "token"}


def test_a_node_lost_while_the_job_runs_is_recovered_on_the_other_nodes_with_exact_output(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tests.multinode", "lose-node", str(tmp_path)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(report)
    assert report["nodes_before"] >= 2, "spread placement should put the tasks on more than one node"
    assert report["tasks_on_lost_node"], report
    assert report["tasks_after_on_alive_nodes"], report
    assert (report["lost"], report["duplicated"], report["keys_wrong"]) == (0, 0, 0), report
    assert report["status"] == "FINISHED", report
    # Task failures restart the job; a coordinator that was on the node is restarted by Ray and recovers it.
    assert report["restarts"] >= 1 or report["coordinator_recovered"], report


def _free_port() -> int:
    """A free port below the kernel's ephemeral range (from 32768), so that no
    connection the test session makes meanwhile takes it before the head binds it."""
    while True:
        port = random.randrange(20000, 32768)  # above Ray's worker ports (10002-19999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def _head_command(port: int, extra: list[str]) -> str:
    """ray_cluster.yaml's head start command as `ray up` runs it on the head, on this
    machine: its venv is this one, and its fixed port and the autoscaler config
    `ray up` writes give way to ports of its own (the test session's cluster holds
    the defaults) and --block (the test stops it)."""
    config = yaml.safe_load(open(os.path.join(ROOT, "ray_cluster.yaml")))
    command = config["head_start_ray_commands"][1]
    fixed = "--port=6379 --autoscaling-config=~/ray_bootstrap_config.yaml"
    assert command.startswith(". ~/weir/.venv/bin/activate && ") and command.endswith(fixed), command
    return command.replace("~/weir/.venv", sys.prefix).replace(fixed, " ".join([f"--port={port}", "--block", *extra]))


def _head_logs(temp: str) -> str:
    """The head's side of a failed submission (a dropped connection says nothing
    more on the client's): the dashboard's and agents' logs, and the raylet's errors."""
    logs = pathlib.Path(temp, "session_latest", "logs")
    paths = [
        *sorted(logs.glob("dashboard*.log")),
        *sorted(logs.glob("dashboard*.err")),
        *logs.glob("runtime_env_agent.*"),
    ]
    raylet = logs / "raylet.out"
    errors = (
        [line for line in raylet.read_text(errors="replace").splitlines() if " E " in line or " C " in line]
        if raylet.exists()
        else []
    )
    return "".join(f"\n--- {path.name}:\n" + path.read_text(errors="replace")[-3000:] for path in paths) + (
        "\n--- raylet.out errors:\n" + "\n".join(errors[-20:])
    )


def _start_head(node: pathlib.Path, log: pathlib.Path) -> tuple[subprocess.Popen, str, str]:
    """ray_cluster.yaml's head command, run in ``node`` (its home): the process, its
    temp dir and its dashboard's address."""
    temp = tempfile.mkdtemp(prefix="wr", dir="/tmp")  # short: Ray's socket paths live there
    port, dashboard = _free_port(), _free_port()
    # Ports of their own: the defaults (e.g. the job agent's 52365) are the test session's cluster's.
    own = [
        f"--{name}={_free_port()}"
        for name in (
            "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port",
            "runtime-env-agent-port",
            "metrics-export-port",
            "ray-client-server-port",
        )
    ]
    head_env = {
        k: v for k, v in _env().items() if k not in ("JDK_JAVA_OPTIONS", "RAY_AUTH_MODE")
    }  # the command sets both
    # The teardown's SIGTERM reaches the GCS too, so the node's drain would wait out its 30 s for nothing.
    head_env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    # Ray gives its dashboard 60 s to come up; on a 2-core machine that is also
    # starting the suite's own clusters it has taken longer, and the head gave up.
    head_env["RAY_DASHBOARD_STARTUP_TIMEOUT_S"] = "180"
    # Likewise the raylet gives the runtime env agent 30 s to answer its first call (the
    # submit's working dir), then takes the whole node down: CI saw it under load.
    head_env["RAY_agent_register_timeout_ms"] = "300000"
    head = subprocess.Popen(
        [
            "bash",
            "-c",
            _head_command(
                port,
                [
                    f"--dashboard-port={dashboard}",
                    "--include-dashboard=true",
                    "--num-cpus=2",
                    f"--temp-dir={temp}",
                    "--disable-usage-stats",
                    *own,
                ],
            ),
        ],
        env={**head_env, "HOME": str(node)},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return head, temp, f"http://127.0.0.1:{dashboard}"


def _stop_head(head: subprocess.Popen) -> None:
    """SIGTERM to the head's processes, SIGKILL after 60 s; nothing left is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:  # a loaded machine: the test's own failure, if any, is what to show
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(30)


def _head_up(head: subprocess.Popen, log: pathlib.Path, address: str, token: str) -> bool:
    """Whether the head finished its start-up (``ray start`` said so: its job server
    can answer before ``ray start`` gives up waiting 30 s for the node to register,
    and then exits) and its job server answers; False once the head exited first.
    The job server is asked over HTTP, as `ray job list` does, but without a
    process that imports Ray each second beside a head starting on 2 cores."""
    deadline = time.monotonic() + 240  # a head starting beside the suite on 2 cores has taken over 120 s
    while "Ray runtime started." not in log.read_text() or not _jobs_answer(address, token):
        if head.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the head did not start with a job server that answers within 240 s"
        time.sleep(1)
    return True


def _jobs_answer(address: str, token: str) -> bool:
    request = urllib.request.Request(f"{address}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200
    except OSError:  # refused, reset, timed out, or an HTTP error status
        return False


def test_ray_job_submit_to_a_cluster_started_by_the_yamls_command_from_an_empty_home(tmp_path):
    """As README's cluster set-up goes: the user makes a token on their machine,
    `ray up` mounts it into the node's otherwise empty home and runs the yaml's
    start command there (token mode), and the user's `ray job submit` is let in."""
    user, node = tmp_path / "user-home", tmp_path / "node-home"
    user.mkdir()
    subprocess.run(
        [RAY, "get-auth-token", "--generate"], env={**_env(), "HOME": str(user)}, capture_output=True, check=True
    )
    (node / ".ray").mkdir(parents=True)
    shutil.copy(user / ".ray" / "auth_token", node / ".ray" / "auth_token")  # the yaml's file_mounts
    client = {**_env(), "HOME": str(user)}  # the user's machine, with the token
    # Ray's own start-up waits (a raylet's for its agents, `ray start`'s 30 s for the
    # node to register) have killed the head under the suite's load on 2 cores: a
    # head that exits before its start-up is done is started once more. Two exits
    # fail the test with both heads' logs.
    exits = []
    for attempt in (1, 2):
        log = tmp_path / f"head-{attempt}.log"
        head, temp, address = _start_head(node, log)
        try:
            if _head_up(head, log, address, (user / ".ray" / "auth_token").read_text().strip()):
                break
        except BaseException:
            _stop_head(head)
            raise
        exits.append(log.read_text()[-3000:] + _head_logs(temp))
        _stop_head(head)
    else:
        pytest.fail("the yaml's head command exited before its start-up was done, twice:\n" + "\n=====\n".join(exits))
    try:
        out = str(tmp_path / "out")
        deadline = time.monotonic() + 120  # the agent's own wait, after the job server's
        while True:
            proc = subprocess.run(
                [
                    RAY,
                    "job",
                    "submit",
                    "--address",
                    address,
                    "--working-dir",
                    ROOT,
                    "--",
                    sys.executable,
                    "-m",
                    "examples.keyed_sum",
                    "--records",
                    "100000",
                    "--output",
                    out,
                ],
                env=client,
                capture_output=True,
                text=True,
                timeout=600,
            )
            # The job server answers before the node's agent that runs jobs has registered
            # ("No available agent to submit job"), and under load it has dropped the
            # request: a submit that did not get the job in is tried again.
            if proc.returncode == 0 or "submitted successfully" in proc.stdout or time.monotonic() > deadline:
                break
            assert head.poll() is None, "the yaml's head command exited: " + log.read_text()[-3000:] + _head_logs(temp)
            time.sleep(2)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:] + _head_logs(temp)
        assert "final sums of 1000 keys match plain Python: True" in proc.stdout, proc.stdout[-4000:]
        assert "succeeded" in proc.stdout
    finally:
        _stop_head(head)
