"""Shared fixtures. One local Ray cluster per test session (started on first use),
shared by every integration test; unit tests never start Ray."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Coordinators of ended jobs leave soon: a test session runs many jobs.
os.environ.setdefault("WEIR_JOB_LINGER_S", "20")
# The session's pool keeps 4 fresh slots per shape, not 8: its driver's jobs
# reuse its own slots, and the tests use many shapes, each of whose spares is a
# process start (2 s of CPU) the suite would pay for.
os.environ.setdefault("WEIR_POOL_IDLE_SLOTS", "4")
# Every JVM of the session (Spark's driver, app master and executors, each
# notebook kernel's, the Kafka broker) compiles with C1 only: on 2 cores a Spark
# session then starts in 18 s instead of 21 and its first query takes 6 s
# instead of 11, with a third less CPU. weir adds its own flags to these
# (docs/spark.md).
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# Credentials for the S3 endpoint the tests start (moto accepts any), in the
# environment as a user's would be, never on a real account; the session's Ray
# actors get them through its runtime env.
S3_ENV = {"AWS_ACCESS_KEY_ID": "weir-tests", "AWS_SECRET_ACCESS_KEY": "weir-tests", "AWS_EC2_METADATA_DISABLED": "true"}
os.environ.update(S3_ENV)
# The slot pool runs with its defaults, as users get it: idle task actors never
# take the cluster's last CPU, so Spark and Ray Data tasks still find room.


# README's test command runs two pytest-xdist workers (`-n 2 --dist loadgroup`).
# One takes every file with a test on the session's Ray cluster (the Spark
# session runs on it too), in file order, so that a file's tests share one
# worker's state; the other takes the rest: the in-process tests, Kafka against
# its own broker, and the files that start Ray clusters of their own. The first
# worker's files are the longer share, so a few of them (SECOND_CLUSTER, no
# Spark in them) form a group of their own, which xdist hands to the worker that
# runs out of work first: the other one, which starts a session cluster of its
# own for them once its in-process tests are done (where the first worker used
# to run alone for a third of the suite with the second core half idle).
SECOND_CLUSTER = (
    "test_coordinator_recovery.py",
    "test_nexmark_on_ray.py",
    "test_rocksdb_on_ray.py",
    "test_stress.py",
    "test_targeted_kills.py",
    "test_ttl_windows_batches_on_ray.py",
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    on_cluster = {item.path for item in items if "ray_cluster" in item.fixturenames}
    for item in items:
        if item.path not in on_cluster:
            group = "apart"
        elif item.path.name in SECOND_CLUSTER:
            group = "second-cluster"
        else:
            group = "session-cluster"
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the controller: under loadgroup a worker's test ids carry their group (``@name``)."""
    if node.config.getoption("dist") == "loadgroup" and ids and "@" not in ids[0]:
        pytest.exit(
            "pytest-xdist lost the test groups (pytest-dev/pytest-xdist#1386): install pytest<9.2",
            pytest.ExitCode.USAGE_ERROR,
        )


@pytest.fixture(scope="session")
def ray_cluster():
    """The address of a local Ray cluster for this test session."""
    import ray

    from weir.actors.cluster import ensure_ray

    os.environ.pop("RAY_ADDRESS", None)
    if not ray.is_initialized():
        from weir.actors.cluster import java_env

        os.environ.update(java_env())
        ray.init(  # without Ray's workers for this driver's tasks, as ensure_ray's local cluster
            include_dashboard=False,
            runtime_env={"env_vars": {**java_env(), **S3_ENV}},
            _system_config={"prestart_worker_first_driver": False},
        )
    ensure_ray()
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server for this test process (tests/s3.py), started on first use."""
    from tests.s3 import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(ray_cluster):
    """One raydp Spark session for the test session (it takes ~20 s to start);
    its executor takes half a CPU so stream tasks still fit on a small machine."""
    from weir.connectors.spark import spark_session, stop_spark

    session = spark_session(executors=1, cores=1, memory="1g", app_name="weir-tests", executor_cpus=0.5)
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def kafka_broker():
    """A real single-node Kafka broker for the test session (tests/kafka_broker.py)."""
    from tests.kafka_broker import KafkaBroker

    broker = KafkaBroker().start()
    yield broker
    broker.stop()


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "out")


@pytest.fixture
def checkpoint_dir(tmp_path):
    return "file://" + str(tmp_path / "checkpoints")
