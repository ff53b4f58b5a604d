"""The race FLINK-16986 exists for: split assignments racing with checkpoints and
failover. A seeded simulation drives the real job master, split enumerator and
stream tasks by hand; every message between them (triggers, acks, split
requests, assignments, their acknowledgements) travels through a network that
delivers in an order the seed picks, as threaded Ray actors may. Tasks are
killed and events lost at random moments. A two-phase-commit sink records what
each checkpoint committed; at the end every record of every split must have been
committed exactly once. With the event valve switched off the same harness finds
splits lost or read twice, so the check can fail.
"""

from __future__ import annotations

import collections
import random
from typing import Any, Callable

import cloudpickle
import pytest

from runtime import StreamExecutionEnvironment
from runtime.config import RestartStrategy
from runtime.errors import WeirError
from runtime.events import CheckpointBarrier
from runtime.executor import JobStatus
from runtime.jobmaster import Deployment, JobMaster, MasterPorts
from runtime.mailbox import MailboxClosedError
from runtime.operators import OperatorContext
from runtime.sinks import Sink, SinkWriter
from runtime.sources import IndexedReader, IndexSplit, Source, SourceCoordinator, SourceReader
from runtime.task import (
    Cancel,
    NotifyCheckpointAborted,
    NotifyCheckpointComplete,
    OperatorEvent,
    StreamTask,
    TaskResult,
    TaskState,
    TriggerCheckpoint,
)

SPLITS, SPLIT_SIZE, PARALLELISM = 12, 5, 3
RECORDS = SPLITS * SPLIT_SIZE
COMMITTED: dict[str, dict[tuple[Any, ...], list[int]]] = collections.defaultdict(dict)


class ManySplits(Source[int]):
    dynamic_splits = True  # a split per request: the most assignments to race with

    def create_splits(self, parallelism: int) -> list[Any]:
        return [IndexSplit(i, i * SPLIT_SIZE, (i + 1) * SPLIT_SIZE) for i in range(SPLITS)]

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        return IndexedReader(lambda i: i)


class MemorySink(Sink):
    """Two-phase commit into COMMITTED[run]: a transaction per (attempt, subtask,
    checkpoint), published idempotently."""

    def __init__(self, run: str) -> None:
        self.run = run

    def create_writer(self, ctx: OperatorContext) -> SinkWriter:
        return _MemoryWriter(self.run, ctx)


class _MemoryWriter(SinkWriter):
    def __init__(self, run: str, ctx: OperatorContext) -> None:
        self._run, self._ctx, self._buffer = run, ctx, []  # type: ignore[var-annotated]

    def write(self, records: list[Any]) -> None:
        self._buffer.extend(records)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        txn, self._buffer = ((self._ctx.attempt_id, self._ctx.subtask, checkpoint_id), self._buffer), []
        return [txn]

    def commit(self, committables: list[Any]) -> None:
        for txn, records in committables:
            COMMITTED[self._run][txn] = list(records)


class Network:
    """Messages in flight; ``deliver_one`` delivers one the seed picks."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.in_flight: list[tuple[str, Any, Callable[[], None]]] = []  # (kind, target, deliver)

    def post(self, kind: str, target: Any, deliver: Callable[[], None]) -> None:
        self.in_flight.append((kind, target, deliver))

    def deliver_one(self) -> None:
        _, _, deliver = self.in_flight.pop(self.rng.randrange(len(self.in_flight)))
        deliver()


class SimPorts(MasterPorts):
    """Every report to the job master travels through the simulated network."""

    def __init__(self, sim: "Sim", d: Deployment) -> None:
        super().__init__(d)
        self._sim = sim
        self.backpressured_s = 0.0

    def post(self, letter: Any) -> None:
        self._sim.net.post("to-master", None, lambda: self._sim.master.mailbox.put_control(letter))

    def send(self, output: int, channel: int, seq: int, payload: bytes) -> None:
        raise AssertionError("the simulated job is one chained task per subtask")

    def drain_outputs(self) -> None:
        pass


class Sim:
    """The job master's TaskGateway, with tasks run by hand in harness mode."""

    def __init__(self, seed: int, storage: str, valve: bool, failover: str) -> None:
        self.rng = random.Random(seed)
        self.net = Network(self.rng)
        self.now = 0.0
        self.run = f"run-{seed}-{valve}-{failover}"
        COMMITTED.pop(self.run, None)
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(PARALLELISM).set_batch_size(2)  # small polls: more interleavings
        env.enable_checkpointing(100)
        env.checkpoint_config.set_checkpoint_storage(storage)
        env.set_restart_strategy(RestartStrategy.fixed_delay(1000, 0.0))
        env.set_failover_strategy(failover)  # "region": each subtask is a region, its split reader reset alone
        env.from_source(ManySplits(), source_name="splits").sink_to(MemorySink(self.run))
        self.master = JobMaster(env.get_job_graph("race"), self, clock=lambda: self.now, event_valve=valve)
        self.tasks: dict[Any, StreamTask] = {}
        self.attempts: dict[Any, int] = {}
        self.exits: list[tuple[Any, TaskResult]] = []
        self.failures = 0
        self.region_restarts = 0

    # ------------------------------------------------------------ TaskGateway
    def deploy(self, deployments: list[Deployment]) -> None:
        self.region_restarts += len(deployments) < PARALLELISM
        for d in deployments:
            self.tasks[d.key] = StreamTask(cloudpickle.loads(cloudpickle.dumps(d.task)), SimPorts(self, d))
            self.attempts[d.key] = d.attempt
            self.tasks[d.key].start()

    def _to_task(self, kind: str, key: Any, letter: Any) -> None:
        attempt = self.attempts.get(key)

        def deliver() -> None:
            task = self.tasks.get(key)
            if task is None or attempt != self.attempts.get(key):
                return  # the task is gone; its exit was reported
            try:
                task.put_letter(letter)
            except MailboxClosedError:
                return
            self._after(key, task.run_until_idle())

        self.net.post(kind, key, deliver)

    def trigger_checkpoint(self, task: Any, barrier: CheckpointBarrier, stop_drain: bool | None = None) -> None:
        self._to_task("trigger", task, TriggerCheckpoint(barrier, stop_drain))

    def notify_checkpoint_complete(self, task: Any, checkpoint_id: int) -> None:
        self._to_task("complete", task, NotifyCheckpointComplete(checkpoint_id))

    def notify_checkpoint_aborted(self, task: Any, checkpoint_id: int) -> None:
        self._to_task("aborted", task, NotifyCheckpointAborted(checkpoint_id))

    def cancel(self, task: Any) -> None:
        self._to_task("cancel", task, Cancel())

    def send_operator_event(self, task: Any, operator_uid: str, event_id: int, event: Any) -> None:
        self._to_task("event", task, OperatorEvent(operator_uid, event_id, event))

    def kill(self, tasks: frozenset[Any]) -> None:
        self.tasks = {k: t for k, t in self.tasks.items() if k not in tasks}
        self.attempts = {k: a for k, a in self.attempts.items() if k not in tasks}
        self.exits = [e for e in self.exits if e[0] not in tasks]

    def kill_all(self) -> None:
        self.kill(frozenset(self.attempts))

    def poll_exits(self) -> list[tuple[Any, TaskResult]]:
        out, self.exits = self.exits, []
        return out

    def metrics(self) -> list[dict[str, Any]]:
        return []

    # ------------------------------------------------------------ driving
    def _after(self, key: Any, result: TaskResult | None) -> None:
        task = self.tasks.get(key)
        if task is not None:
            task.wait_for_snapshots()
        if result is not None:
            self.tasks.pop(key, None)
            self.exits.append((key, result))

    def _fail(self, key: Any, why: str) -> None:
        self.tasks.pop(key, None)
        self.exits.append((key, TaskResult(TaskState.FAILED, WeirError(why))))
        self.failures += 1

    def step(self, max_failures: int) -> None:
        r = self.rng.random()
        if r < 0.5 and self.net.in_flight:
            self.net.deliver_one()
        elif r < 0.75 and self.tasks:
            key = self.rng.choice(sorted(self.tasks))
            self._after(key, self.tasks[key].poll_source())
        elif r < 0.985 or self.failures >= max_failures or not self.tasks:
            self.now += self.rng.uniform(0.0, 0.03)
            self.master.run_until_idle()
        else:
            events = [n for n, (kind, target, _) in enumerate(self.net.in_flight) if kind == "event" and target in self.tasks]
            if events and self.rng.random() < 0.5:
                _, key, _ = self.net.in_flight.pop(self.rng.choice(events))
                self._fail(key, "an operator event to it was lost")
            else:
                self._fail(self.rng.choice(sorted(self.tasks)), "killed")


def run_race(seed: int, storage: str, valve: bool = True, max_failures: int = 3, failover: str = "region") -> tuple[int, int, int, int]:
    """One seeded run to the job's end: (lost, duplicated, failures, region restarts)."""
    sim = Sim(seed, storage, valve, failover)
    sim.master.start()
    for _ in range(200_000):
        if sim.master.status.is_terminal:
            break
        sim.step(max_failures)
    assert sim.master.status is JobStatus.FINISHED, f"seed {seed}: job ended {sim.master.status.value}: {sim.master.failure}"
    counts = collections.Counter(r for records in COMMITTED.pop(sim.run, {}).values() for r in records)
    lost = sum(1 for r in range(RECORDS) if counts[r] == 0)
    duplicated = sum(c - 1 for c in counts.values() if c > 1)
    return lost, duplicated, sim.failures, sim.region_restarts


@pytest.mark.parametrize("failover", ["region", "full"])
def test_split_assignment_races_lose_and_duplicate_nothing_over_200_seeds(tmp_path, failover):
    """Region failover resets one subtask's reader while the enumerator and the
    other readers go on; full failover restores them all."""
    failures = regions = 0
    for seed in range(200):
        lost, duplicated, f, r = run_race(seed, f"file://{tmp_path}/valve", failover=failover)
        assert (lost, duplicated) == (0, 0), f"seed {seed}: lost {lost}, duplicated {duplicated} of {RECORDS} records"
        failures, regions = failures + f, regions + r
    print(f"{failover} failover: 200 runs, {failures} task failures, {regions} region restarts, nothing lost or read twice")
    assert failures >= 200, f"only {failures} failures injected over 200 runs: the harness is not racing"
    assert (regions >= failures * 0.9) if failover == "region" else regions == 0


def test_without_the_valve_the_same_harness_finds_splits_lost_or_read_twice(tmp_path):
    bad = []
    for seed in range(200):
        lost, duplicated, _, _ = run_race(seed, f"file://{tmp_path}/novalve", valve=False)
        if lost or duplicated:
            bad.append((seed, lost, duplicated))
    assert any(lost for _, lost, _ in bad), f"no run lost a split without the valve (runs with duplicates: {bad})"
    assert any(dup for _, _, dup in bad), f"no run read a split twice without the valve (runs with losses: {bad})"


@pytest.mark.parametrize("seed", [7])
def test_a_run_is_reproducible_from_its_seed(tmp_path, seed):
    assert run_race(seed, f"file://{tmp_path}/a") == run_race(seed, f"file://{tmp_path}/b")


def test_a_region_restart_that_kept_its_splits_assigned_would_lose_them(tmp_path, monkeypatch):
    """The check can fail: a reset subtask whose enumerator did not take back the
    splits sent after the checkpoint loses them."""
    monkeypatch.setattr(SourceCoordinator, "subtask_reset", lambda self, subtask: True)
    lost = sum(run_race(seed, f"file://{tmp_path}/keep")[0] for seed in range(20))
    assert lost > 0
