"""A real single-node Apache Kafka broker (KRaft mode) for tests and for trying
weir with Kafka: its jars come from Maven Central through Maven, cached under
``~/.cache/weir/kafka-<version>``; it listens on a free local port and keeps its
log in a folder of its own. Needs Java 17 and ``mvn``.

    python -m tests.kafka_broker            # prints the bootstrap address; Ctrl-C stops it
"""

from __future__ import annotations

import base64
import fcntl
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

KAFKA_VERSION = "4.1.1"
CACHE = pathlib.Path(os.environ.get("WEIR_CACHE", pathlib.Path.home() / ".cache" / "weir")) / f"kafka-{KAFKA_VERSION}"

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weir.test</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-nop</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
"""


def jars() -> pathlib.Path:
    """The broker's jars, resolved once (about 10 s and 43 MB)."""
    lib = CACHE / "lib"
    if (CACHE / "complete").exists():
        return lib
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise RuntimeError("a Kafka broker for the tests needs Java 17 and Maven (mvn) on the PATH")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # both test workers may want a broker first on a fresh machine
        if (CACHE / "complete").exists():
            return lib
        (CACHE / "pom.xml").write_text(_POM)
        out = subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-f",
                str(CACHE / "pom.xml"),
                "dependency:copy-dependencies",
                f"-DoutputDirectory={lib}",
                "-DincludeScope=runtime",
            ],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"resolving Kafka {KAFKA_VERSION} from Maven Central failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
            )
        (CACHE / "complete").touch()
    return lib


class _ExitedAtStart(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaBroker:
    """One broker and controller in one JVM; ``bootstrap`` is its address."""

    STARTUP_TIMEOUT_S = 120.0
    TRIES = 3

    def __init__(self, port: int | None = None) -> None:
        self._fixed_port = port
        self.port = port or _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="weir-kafka-"))
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> "KafkaBroker":
        """Start it; a free port picked here may be taken by another process
        before the JVM binds it (a busy Ray cluster opens many), so a broker that
        exits at start is tried again on new ports."""
        for attempt in range(1, self.TRIES + 1):
            try:
                return self._start()
            except _ExitedAtStart:
                if attempt == self.TRIES or self._fixed_port is not None:
                    raise
                self.port = _free_port()
                self.bootstrap = f"127.0.0.1:{self.port}"
                self._dir = pathlib.Path(tempfile.mkdtemp(prefix="weir-kafka-"))
        raise AssertionError("unreachable")

    def _start(self) -> "KafkaBroker":
        lib = jars()
        controller = _free_port()
        config = self._dir / "server.properties"
        config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{controller}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={self._dir / 'data'}",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "transaction.state.log.num.partitions=4",
                    "group.initial.rebalance.delay.ms=0",
                    "num.partitions=1",
                ]
            )
            + "\n"
        )
        java = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-cp", f"{lib}/*"]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # "=": a base64 id may start with "-", which would read as an option.
        formatted = subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config)],
            capture_output=True,
            text=True,
        )
        if formatted.returncode != 0:
            raise RuntimeError(
                f"formatting the Kafka broker's storage failed:\n{formatted.stdout[-2000:]}{formatted.stderr[-2000:]}"
            )
        log = open(self._dir / "broker.log", "wb")
        self._process = subprocess.Popen([*java, "kafka.Kafka", str(config)], stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.STARTUP_TIMEOUT_S
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap, "log_level": 0}
        )  # refused connections are expected here
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                log = (self._dir / "broker.log").read_text()[-3000:]
                shutil.rmtree(self._dir, ignore_errors=True)
                raise _ExitedAtStart(f"the Kafka broker exited at start:\n{log}")
            try:
                if admin.list_topics(timeout=2).brokers:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Kafka broker did not answer within {self.STARTUP_TIMEOUT_S:.0f} s")
            time.sleep(0.5)
        # The transaction coordinator loads its log on first use, for seconds:
        # have that done before a test times its first transaction.
        from confluent_kafka import Producer

        Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "weir-broker-warm-up"}).init_transactions(
            self.STARTUP_TIMEOUT_S
        )

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
        # Metadata reaches the broker's caches shortly after: wait until it lists them all.
        deadline = time.monotonic() + 30
        while len(admin.list_topics(name, timeout=5).topics[name].partitions) < partitions:
            assert time.monotonic() < deadline, f"topic {name} did not get its {partitions} partitions"
            time.sleep(0.1)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    broker = KafkaBroker(int(sys.argv[1]) if len(sys.argv) > 1 else 9092).start()
    print(f"Kafka {KAFKA_VERSION} is up at {broker.bootstrap} (Ctrl-C stops it)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        broker.stop()
