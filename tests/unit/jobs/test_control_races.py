"""Control calls racing each other and the periodic checkpoints (in-process
executor): seeded trials (50, ``WEIR_RACE_TRIALS`` for more), each firing stop (with and without drain),
savepoint and cancel from several threads at random moments into a running job.

Each trial must end in exactly one terminal state; no call may hang (each has a
timeout) and each failure must be a clear weir error; a cancel wins over a
savepoint in flight. Every location a call returned must restore: resumed to the
end, the job's final state per partition matches the oracle. The committed output
is checked record by record (unique partition and sequence per record): nothing
duplicated or out of order ever, and nothing lost where the job was run to its
end (a cancelled or drained job ends early by design).
"""

from __future__ import annotations

import json
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.checker import check_sequences
from tests.sequences import PARTITIONS, committed_sequences, sequence_job
from weir import StreamExecutionEnvironment
from weir.connectors.files import committed_files
from weir.runtime.errors import JobCancelledError, JobRequestError, WeirError
from weir.runtime.executor import JobStatus
from weir.runtime.jobmaster import JobMaster
from weir.runtime.sinks import Sink, SinkWriter

N = 1_500
EXPECTED = {p: N // PARTITIONS for p in range(PARTITIONS)}
TRIALS = int(os.environ.get("WEIR_RACE_TRIALS", "50"))


def _env(tmp_path, name: str, restore: str | None = None) -> tuple[StreamExecutionEnvironment, str]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(30)
    env.get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/checkpoints")
    if restore is not None:
        env.restore_from_savepoint(restore)
    out = str(tmp_path / name)
    sequence_job(env, out, N, rate=4_000)
    return env, out


def _final_counts(*outs: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for out in outs:
        for path in committed_files(out):
            with open(path) as f:
                for p, _, c in map(json.loads, f):
                    counts[p] = max(counts.get(p, 0), c)
    return counts


def _call(client: Any, op: str, where: str) -> tuple[str, Any]:
    try:
        if op == "cancel":
            client.cancel(timeout_s=20)
            return op, None
        if op == "savepoint":
            return op, client.savepoint(where, timeout_s=20)
        return op, client.stop(where, drain=(op == "stop-drain"), timeout_s=20)
    except Exception as exc:  # judged by the trial: only a clear weir error is fine
        return op, exc


def _completed(client: Any) -> int:
    return sum(c["status"] == "COMPLETED" for c in client.checkpoints())


def _after_checkpoints(client: Any, count: int) -> None:
    """Wait until ``count`` checkpoints completed, or until the job ended (another
    call ended it: the call goes anyway, and must be refused clearly)."""
    try:
        client.wait_until(lambda c: _completed(c) >= count)
    except WeirError:
        pass


def run_trial(seed: int, tmp_path) -> dict[str, Any]:
    """The moments are checkpoints: the calls start after a seeded number of
    completed checkpoints, each one or two more apart, so they meet the job at
    its start, in its middle and near its end, and each other in flight."""
    rng = random.Random(seed)
    env, out = _env(tmp_path, "out")
    client = env.execute_async(f"race-{seed}", executor="local")
    start = rng.randint(0, 4)
    ops = [rng.choice(["stop", "stop-drain", "savepoint", "savepoint", "cancel"]) for _ in range(rng.randint(2, 4))]
    offsets = [rng.randint(0, 2) for _ in ops]
    results: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def fire(n: int, op: str) -> None:
        try:
            _after_checkpoints(client, start + offsets[n])
            r = _call(client, op, str(tmp_path / f"sp-{n}"))
        except Exception as exc:  # a wait that timed out: judged by the trial
            r = (op, exc)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=fire, args=(n, op)) for n, op in enumerate(ops)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), f"seed {seed}: a control call hung"
    try:
        status = client.wait(30).status
    except JobCancelledError:
        status = JobStatus.CANCELED
    assert status.is_terminal and client.status() is status, f"seed {seed}: {status}"
    unclear = [(op, r) for op, r in results if isinstance(r, Exception) and not isinstance(r, WeirError)]
    assert not unclear, f"seed {seed}: calls that timed out or failed without a weir error: {unclear}"

    stops = [(op, r) for op, r in results if op.startswith("stop") and isinstance(r, str)]
    assert len(stops) <= 1, f"seed {seed}: two stops succeeded: {stops}"
    if "cancel" in ops and status is JobStatus.CANCELED:
        assert not stops, f"seed {seed}: cancelled, yet a stop succeeded"
    if stops:
        assert status is (JobStatus.FINISHED if stops[0][0] == "stop-drain" else JobStatus.SUSPENDED), (
            f"seed {seed}: {stops} but {status}"
        )

    # Whatever happened, nothing is ever duplicated or out of order.
    verdict = check_sequences(committed_sequences(out), EXPECTED)
    assert (verdict.duplicated, verdict.unexpected, verdict.out_of_order) == (0, 0, 0), f"seed {seed}: {verdict}"
    if status is JobStatus.FINISHED and not stops:
        assert verdict.exact, f"seed {seed}: ran to its end yet {verdict}"
    if stops and stops[0][0] == "stop":  # suspended: resuming finishes the job exactly once
        resumed, resumed_out = _env(tmp_path, "resumed", restore=stops[0][1])
        resumed.execute(f"race-{seed}-resumed", executor="local")
        verdict = check_sequences(committed_sequences(out, resumed_out), EXPECTED)
        assert verdict.exact, f"seed {seed}: stop + resume gave {verdict}"
        assert _final_counts(out, resumed_out) == EXPECTED
    for n, (op, r) in enumerate(results):  # every savepoint taken restores to the exact final state
        if op == "savepoint" and isinstance(r, str):
            again, again_out = _env(tmp_path, f"from-savepoint-{n}", restore=r)
            again.execute(f"race-{seed}-sp-{n}", executor="local")
            assert _final_counts(again_out) == {p: c for p, c in EXPECTED.items() if p in _final_counts(again_out)}
            assert check_sequences(committed_sequences(again_out), EXPECTED).duplicated == 0
    return {"status": status, "ops": ops, "results": results}


def test_seeded_control_races_end_in_one_state_and_every_savepoint_restores(tmp_path_factory):
    outcomes: dict[str, int] = {}
    calls: dict[str, int] = {}
    # Trials run 4 at a time: each job is paced, so they mostly wait.
    folders = [tmp_path_factory.mktemp(f"race-{seed}") for seed in range(TRIALS)]
    with ThreadPoolExecutor(4) as pool:
        trials = list(pool.map(run_trial, range(TRIALS), folders))
    for trial in trials:
        outcomes[trial["status"].value] = outcomes.get(trial["status"].value, 0) + 1
        for op, r in trial["results"]:
            key = f"{op} {'ok' if isinstance(r, str) or r is None else 'refused'}"
            calls[key] = calls.get(key, 0) + 1
    print(f"\n{TRIALS} control races: endings {outcomes}; calls {dict(sorted(calls.items()))}")
    # The harness must reach every ending, or it is not racing.
    assert set(outcomes) == {"CANCELED", "FINISHED", "SUSPENDED"}, outcomes


WRITING, PREPARING, RELEASE = (
    threading.Event(),
    threading.Event(),
    threading.Event(),
)  # module level: pickled by reference


class _StuckPrepare(SinkWriter):
    def write(self, records: list[Any]) -> None:
        WRITING.set()

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        PREPARING.set()
        RELEASE.wait(60)  # the savepoint stays in flight
        return []


class StuckPrepareSink(Sink):
    def create_writer(self, ctx: Any) -> SinkWriter:
        return _StuckPrepare()


@pytest.fixture
def cancelled_mid_snapshot(tmp_path, monkeypatch):
    """Runs ``op`` (a savepoint or a stop) into a job whose sink holds the
    snapshot in flight, cancels the job meanwhile, and gives what ``op`` returned
    or raised. No periodic checkpoints: the one the sink holds is ``op``'s."""
    monkeypatch.setattr(JobMaster, "CANCEL_TIMEOUT_S", 0.0)  # the stuck sink task is killed at once (10 s by default)
    for gate in (WRITING, PREPARING, RELEASE):
        gate.clear()

    def run(op: str, job: str) -> Any:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/checkpoints")
        env.from_generator(lambda i: i, records_per_second=1_000).sink_to(StuckPrepareSink())
        client = env.execute_async(job, executor="local")
        outcome: list[Any] = []
        t = threading.Thread(target=lambda: outcome.append(_call(client, op, str(tmp_path / "sp"))))
        assert WRITING.wait(30)  # running, records through
        t.start()
        assert PREPARING.wait(30)  # the snapshot is being taken
        client.cancel(timeout_s=20)
        t.join(30)
        assert not t.is_alive() and client.status() is JobStatus.CANCELED
        ((_, result),) = outcome
        return result

    yield run
    RELEASE.set()


def test_a_cancel_wins_over_a_savepoint_in_flight(cancelled_mid_snapshot):
    result = cancelled_mid_snapshot("savepoint", "cancel-wins")
    assert isinstance(result, WeirError) and "cancel" in str(result), result


def test_a_stop_whose_savepoint_a_cancel_overtook_says_the_job_was_cancelled(cancelled_mid_snapshot):
    """Its caller heard that the stop failed and the job keeps running, while the job ended CANCELED."""
    result = cancelled_mid_snapshot("stop", "cancel-during-stop")
    assert isinstance(result, JobRequestError) and str(result) == (
        "stop of job 'cancel-during-stop' did not happen: the job was cancelled before its savepoint completed"
    ), result
