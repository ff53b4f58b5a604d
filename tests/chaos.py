"""Chaos on Ray. Killing task actors of a running job at seeded random moments
(``ray.kill`` or SIGKILL of the worker process, in bursts), timing each recovery
(from the last kill of a burst to the first output a new attempt committed); and
a mixed schedule of every control and death a job meets (:func:`mixed_chaos`)."""

from __future__ import annotations

import os
import pathlib
import random
import re
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import ray

from tests.checker import SequenceVerdict, Verdict, check_running_sums, check_sequences
from tests.pausing import PacedUntilGate
from tests.sequences import PARTITIONS, committed_sequences, sequence_job
from weir import JobStatus, RestartStrategy, StreamExecutionEnvironment
from weir.connectors.files import FileSink, committed_files, read_committed
from weir.runtime.errors import WeirError

_ATTEMPT = re.compile(r"part-([0-9a-f]+)-")
RECORDS = 600_000


@dataclass
class ChaosRun:
    seed: int
    killed: list[str] = field(default_factory=list)
    restarts: int = 0
    verdict: Verdict | None = None
    recovery_s: list[float] = field(default_factory=list)


def kill_random_task(client, rng: random.Random, vertex: str | None = None) -> str | None:
    """Kill one task actor of the running job (of ``vertex``, a vertex id, if
    given): half the time ``ray.kill``, half the time SIGKILL of its worker
    process (this machine's cluster)."""
    names = [n for n in client.tasks() if vertex is None or n.rsplit("/", 2)[1] == vertex]
    if not names or client.status() is not JobStatus.RUNNING:
        return None
    name = rng.choice(names)
    try:
        _, vertex, subtask = name.rsplit("/", 2)
        actor = client.task_actor(vertex, int(subtask))
        if rng.random() < 0.5:
            ray.kill(actor)
            return f"{name} (ray.kill)"
        os.kill(ray.get(actor.pid.remote(), timeout=5), signal.SIGKILL)
        return f"{name} (SIGKILL)"
    except (WeirError, ray.exceptions.RayError, ProcessLookupError):
        return None  # replaced or gone meanwhile


def kill_coordinator(client, rng: random.Random) -> str | None:
    """Kill the running job's coordinator; a standby takes the job over and recovers it."""
    if client.status() is not JobStatus.RUNNING:
        return None
    ray.kill(client.coordinator)
    return "job coordinator (ray.kill)"


def _attempts(out_dir: str) -> set[str]:
    return {m.group(1) for p in committed_files(out_dir) if (m := _ATTEMPT.search(os.path.basename(p)))}


def keyed_sum_with_kills(
    seed: int,
    out_dir: str,
    checkpoint_dir: str,
    records: int = RECORDS,
    kills: int = 3,
    pause_s: tuple[float, float] = (0.3, 1.5),
    burst: int = 1,
    rate: int = 60_000,
    victim: Callable[[Any, random.Random], str | None] = kill_random_task,
    default_restarts: bool = False,
    state_backend: Any = None,
    unpace_gate: str | None = None,
) -> ChaosRun:
    """A keyed running sum (parallelism 2, checkpoints every 500 ms, the source
    limited to ``rate`` records/s) while ``kills`` task actors die (or what
    ``victim`` kills), ``burst`` at a time, ``pause_s`` apart; after each burst,
    waits for the job to commit output from a new attempt and records how long
    that took. Restarts: 0.2 s apart, enough for the kills, or with
    ``default_restarts`` the strategy a user gets without setting one;
    ``state_backend``: where keyed state lives (the heap unless given). With
    ``unpace_gate`` (a file path) the source keeps to ``rate`` only until the
    kills are done and each has been recovered from: then the file is created
    and the rest of the records run out at full speed. The first kill waits for
    the first completed checkpoint, however long it takes: every kill lands
    after state was saved (a restart from nothing would show no exactly-once)."""
    rng = random.Random(seed)
    run = ChaosRun(seed)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    if state_backend is not None:
        env.set_state_backend(state_backend)
    if not default_restarts:
        env.set_restart_strategy(RestartStrategy.fixed_delay(kills + 5, 0.2))
    source = (
        env.from_generator(lambda i: i, count=records, records_per_second=rate)
        if unpace_gate is None
        else env.from_source(PacedUntilGate(lambda i: i, records, rate, unpace_gate), source_name="generator")
    )
    (
        source.map(lambda i: (i % 1000, 2 * i))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir, format="jsonl"))
    )
    client = env.execute_async(f"chaos-{seed}")
    while not any(c["status"] == "COMPLETED" for c in client.checkpoints()):  # up, reading, state saved
        assert not client.status().is_terminal, "the job ended before its first checkpoint"
        time.sleep(0.05)
    while len(run.killed) < kills and not client.status().is_terminal:
        time.sleep(rng.uniform(*pause_s))
        before = _attempts(out_dir)
        killed_at = None
        for _ in range(min(burst, kills - len(run.killed))):
            name = victim(client, rng)
            if name:
                run.killed.append(name)
                killed_at = time.monotonic()
            time.sleep(rng.uniform(0, 0.3))
        while killed_at is not None and not client.status().is_terminal:
            if _attempts(out_dir) - before:
                run.recovery_s.append(time.monotonic() - killed_at)
                break
            time.sleep(0.05)
    if unpace_gate is not None:
        open(unpace_gate, "w").close()
    result = client.wait(600)
    run.restarts = result.restarts
    run.verdict = check_running_sums(map(tuple, read_committed(out_dir)), ((i % 1000, 2 * i) for i in range(records)))
    print(
        f"seed={seed} kills={len(run.killed)} restarts={run.restarts} lost={run.verdict.lost} "
        f"duplicated={run.verdict.duplicated} "
        f"recovery_s={[round(r, 2) for r in run.recovery_s]}"
    )
    return run


# ---------------------------------------------------------------- mixed chaos
# Every control a user has, and every death, in one seeded schedule against one
# job: task kills, coordinator kills, savepoints, rescales, stops (resumed from
# their savepoint), cancels (resumed from the latest retained checkpoint), and
# sometimes a drained stop to end it. Records carry (partition, sequence), so the
# committed output is checked record by record (Jepsen's total queue).
ACTIONS = {
    "kill task": 3,
    "kill coordinator": 2,
    "savepoint": 2,
    "rescale": 2,
    "stop": 1,
    "cancel": 1,
    "stop with drain": 0.4,
}


@dataclass
class MixedRun:
    seed: int
    actions: list[tuple[str, str]] = field(default_factory=list)  # (action, outcome)
    incarnations: int = 1
    ending: str = ""
    verdict: SequenceVerdict | None = None


def _latest_checkpoint(job_folder: pathlib.Path) -> str | None:
    """The newest complete checkpoint of one job (ids start again with each run)."""
    done = [p for p in job_folder.rglob("chk-*") if (p / "_metadata").exists()]
    return str(max(done, key=lambda p: int(p.name[4:]))) if done else None


def _wait_reading(client: Any) -> None:
    deadline = time.monotonic() + 120
    while not any(m.get("records_in") for m in _quietly(client.metrics, [])):
        assert not client.status().is_terminal and time.monotonic() < deadline, "the job never started reading"
        time.sleep(0.05)


def _quietly(call: Any, default: Any) -> Any:
    try:
        return call()
    except WeirError:  # the coordinator is being restarted
        return default


def _ended(client: Any, timeout_s: float = 120) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while not (status := _quietly(client.status, JobStatus.RUNNING)).is_terminal:
        assert time.monotonic() < deadline, f"the job hangs {status.value}"
        time.sleep(0.1)
    return status


def mixed_chaos(seed: int, tmp: pathlib.Path, n: int = 30_000, rate: float = 3_000, actions: int = 6) -> MixedRun:
    rng = random.Random(seed)
    run = MixedRun(seed)
    out, root = str(tmp / "out"), tmp / "checkpoints"

    def start(restore: str | None) -> Any:
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
        env.enable_checkpointing(300)
        env.get_checkpoint_config().set_checkpoint_storage(f"file://{root}")
        env.set_restart_strategy(RestartStrategy.fixed_delay(20, 0.2))
        if restore is not None:
            env.restore_from_savepoint(restore)
        sequence_job(env, out, n, rate)
        client = env.execute_async(f"mixed-{seed}-{run.incarnations}")
        _wait_reading(client)
        return client

    client, restore = start(None), None
    for step in range(actions):
        time.sleep(rng.uniform(0.3, 1.2))
        action = rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
        try:
            if action == "kill task":
                outcome = kill_random_task(client, rng) or "no task to kill"
            elif action == "kill coordinator":
                ray.kill(client.coordinator)
                outcome = "killed"
            elif action == "savepoint":
                outcome = client.savepoint(str(tmp / f"savepoint-{step}"), timeout_s=30)
            elif action == "rescale":
                p = rng.choice([1, 2, 3])
                outcome = f"to {p}, paused {client.rescale({'count': p}, timeout_s=60):.2f} s"
            elif action in ("stop", "stop with drain"):
                outcome = client.stop(str(tmp / f"stop-{step}"), drain=action == "stop with drain", timeout_s=30)
            else:
                client.cancel(timeout_s=30)
                outcome = "cancelled"
        except WeirError as exc:  # refused, or the coordinator died under the call: the job goes on
            outcome = f"refused: {str(exc).splitlines()[0][:120]}"
        run.actions.append((action, outcome))
        status = _quietly(client.status, JobStatus.RUNNING)
        if not status.is_terminal:
            continue
        if status is JobStatus.FINISHED:  # drained (or the input ran out): the end
            break
        # Suspended or cancelled: resume from the stop's savepoint, else from the latest checkpoint.
        stopped = tmp / f"stop-{step}"
        restore = (
            str(stopped)
            if action == "stop" and any(stopped.glob("savepoint-*/_metadata"))
            else _latest_checkpoint(root / f"mixed-{seed}-{run.incarnations}") or restore
        )
        run.incarnations += 1
        client = start(restore)
    run.ending = _ended(client, 300).value
    if run.ending == JobStatus.FINISHED.value and rng.random() < 0.5:
        # A coordinator that dies after its job ended must not bring the job back.
        files = committed_files(out)
        ray.kill(client.coordinator)
        time.sleep(3)
        assert committed_files(out) == files, f"seed {seed}: the ended job ran again after its coordinator restarted"
        assert _quietly(client.status, JobStatus.FINISHED) is JobStatus.FINISHED
        run.actions.append(("kill coordinator of the ended job", "stayed FINISHED"))
    files = committed_sequences(out)
    drained = any(a == "stop with drain" and not o.startswith("refused") for a, o in run.actions)
    # A drained job ends early by design: per partition, what it committed must be a whole prefix.
    expected = {p: n // PARTITIONS for p in range(PARTITIONS)}
    if drained:
        expected = {p: 1 + max((s for f in files for q, s in f if q == p), default=-1) for p in range(PARTITIONS)}
    run.verdict = check_sequences(files, expected)
    print(
        f"seed={seed} ending={run.ending} incarnations={run.incarnations} verdict={run.verdict.lost}/{run.verdict.duplicated}"
        f"/{run.verdict.unexpected}/{run.verdict.out_of_order} actions={run.actions}"
    )
    return run
