"""Recovery and rescale times as a user meets them, on a warm cluster.

- recovery: a keyed running sum (parallelism 2, checkpoints every 500 ms, the
  restart strategy a user gets without setting one) while task actors are killed one at a time (``ray.kill`` or
  SIGKILL); each sample is kill -> first output committed by the new attempt
  (the chaos harness of ``tests/chaos.py``, so the figure and the stress suite
  measure the same thing). The output is checked exact at the end. Two runs:
  isolated kills, each 3-4 s after the job recovered from the last, as failures
  come in production; and rapid ones, 0.5-1 s after, where on a small machine
  the process the pool starts to replace the last killed slot (seconds of CPU)
  competes with the recovery from the next kill.
- coordinator recovery: the same job while its job coordinator is killed (the
  pool hands the job to a standby coordinator; it recovers the job from the
  latest checkpoint, on the job's task actors), 3-4 s apart; each sample is
  kill -> first output committed by the recovered job.
- rescale: the same job rescaled back and forth (``client.rescale``) between
  parallelism 2 and 3; each sample is the pause the job master reports (stop at a
  checkpoint -> the new tasks deployed and restored).

    python3 -m bench.recovery [--kills 20] [--rapid-kills 20] [--coordinator-kills 20] [--rescales 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from tests.chaos import keyed_sum_with_kills, kill_coordinator, kill_random_task
from tests.checker import check_running_sums
from tests.pausing import PacedUntilGate
from weir import StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed


def _dist(samples: list[float]) -> str:
    s = sorted(samples)
    return (
        f"n={len(s)} p50 {statistics.median(s):.2f} s, p99 {s[min(len(s) - 1, int(len(s) * 0.99))]:.2f} s, "
        f"max {s[-1]:.2f} s"
    )


def recovery(kills: int, seed: int, pause_s: tuple[float, float], victim=kill_random_task) -> list[float]:
    """The samples; once the kills are done and recovered from, the rest of the
    input runs out at full speed (nothing is measured there)."""
    rate = 60_000
    run = keyed_sum_with_kills(
        seed,
        tempfile.mkdtemp(prefix="weir-rec-out-"),
        "file://" + tempfile.mkdtemp(prefix="weir-rec-chk-"),
        records=int(rate * (pause_s[1] + 2) * kills),
        kills=kills,
        pause_s=pause_s,
        rate=rate,
        victim=victim,
        default_restarts=True,
        unpace_gate=os.path.join(tempfile.mkdtemp(prefix="weir-rec-gate-"), "kills-done"),
    )
    assert run.verdict is not None and (run.verdict.lost, run.verdict.duplicated) == (0, 0), run.verdict
    return run.recovery_s


def coordinator_recovery(kills: int, seed: int) -> list[float]:
    return recovery(kills, seed, ISOLATED_S, kill_coordinator)


def rescales(count: int) -> list[float]:
    # Paced until the rescales are done (one waits, with the job running, until the
    # processes its new tasks need are up: seconds on a loaded small machine), then
    # the rest at full speed.
    n, out = 40_000 * (4 * count + 10), tempfile.mkdtemp(prefix="weir-scale-out-")
    gate = os.path.join(tempfile.mkdtemp(prefix="weir-scale-gate-"), "rescales-done")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage("file://" + tempfile.mkdtemp(prefix="weir-scale-chk-"))
    (
        env.from_source(PacedUntilGate(lambda i: (i % 1000, i), n, 40_000, gate), source_name="generator")
        .key_by(lambda kv: kv[0])
        .sum(1)
        .name("total")
        .sink_to(FileSink(out, format="jsonl"))
    )
    client = env.execute_async("bench-rescale")
    pauses = []
    for i in range(count):
        time.sleep(0.5)
        pauses.append(client.rescale({"total": 3 if i % 2 == 0 else 2}))
    open(gate, "w").close()
    client.wait(600)
    v = check_running_sums(map(tuple, read_committed(out)), ((i % 1000, i) for i in range(n)))
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v
    return pauses


ISOLATED_S, RAPID_S = (3.0, 4.0), (0.5, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="kills 3-4 s after the job recovered from the one before")
    ap.add_argument(
        "--rapid-kills", type=int, default=20, help="kills 0.5-1 s after the job recovered from the one before"
    )
    ap.add_argument("--coordinator-kills", type=int, default=20, help="job coordinator kills 3-4 s apart")
    ap.add_argument("--rescales", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.kills:  # 0 leaves a part out
        isolated = recovery(args.kills, args.seed, ISOLATED_S)
        print(
            f"recovery, isolated kills ({ISOLATED_S[0]:g}-{ISOLATED_S[1]:g} s apart), kill -> first committed output of the new attempt: {_dist(isolated)}"
        )
    if args.rapid_kills:
        rapid = recovery(args.rapid_kills, args.seed, RAPID_S)
        print(
            f"recovery, rapid kills ({RAPID_S[0]:g}-{RAPID_S[1]:g} s apart: the pool's replacement process for the last one "
            f"is still starting on the same cores): {_dist(rapid)}"
        )
    if args.coordinator_kills:
        coordinator = coordinator_recovery(args.coordinator_kills, args.seed)
        print(
            f"recovery, job coordinator killed ({ISOLATED_S[0]:g}-{ISOLATED_S[1]:g} s apart), kill -> first committed output "
            f"of the recovered job: {_dist(coordinator)}"
        )
    if args.rescales:
        pauses = rescales(args.rescales)
        print(f"rescale pause (parallelism 2 <-> 3, client.rescale): {_dist(pauses)}")


if __name__ == "__main__":
    main()
