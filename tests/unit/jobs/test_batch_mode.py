"""BATCH execution mode (``env.set_runtime_mode(RuntimeExecutionMode.BATCH)``),
as Flink's: keyed reduces emit one final value per key, the watermark is
perfect (windows fire at the end of input, nothing is late), every timer fires
at the end of input, no periodic checkpoints, and a failure re-runs the job from
its start while sinks publish once, at its end. Every result is checked against
plain Python; every job runs on the in-process executor."""

from __future__ import annotations

import collections
import os
import threading
import time

import pytest

from tests.final_faults import batch_keyed_sum, committed_totals, expected_totals, first_time
from tests.unit.pure.test_windows import Count
from weir import (
    DiscardingSink,
    EmbeddedRocksDBStateBackend,
    InvalidConfigurationError,
    JobStatus,
    KeyedProcessFunction,
    OutputTag,
    RestartStrategy,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from weir.connectors.files import Encoder, FileSink, OutputFileConfig, RollingPolicy, read_committed
from weir.runtime import checkpoint_flow
from weir.runtime.events import MAX_WATERMARK
from weir.runtime.testing import OperatorHarness

BATCH = RuntimeExecutionMode.BATCH


def _env(checkpoint_dir: str, mode: RuntimeExecutionMode = BATCH, p: int = 2) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    env.set_runtime_mode(mode)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(3, 0.01))
    return env


def _sums(pairs) -> dict:
    """Plain Python: the sum of the values of each key."""
    out: dict = collections.defaultdict(int)
    for k, v in pairs:
        out[k] += v
    return dict(out)


# ---------------------------------------------------------------- keyed reduce and sum


def test_a_batch_reduce_and_sum_emit_each_keys_final_value_once(checkpoint_dir, tmp_path):
    pairs = [(f"k{i % 37}", i % 11) for i in range(5_000)]
    env = _env(checkpoint_dir)
    env.enable_checkpointing(10)  # ignored in batch mode, as in Flink
    keyed = env.from_collection(pairs).key_by(lambda kv: kv[0])
    keyed.reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(FileSink(str(tmp_path / "reduce")))
    keyed.sum(1).sink_to(FileSink(str(tmp_path / "sum")))
    (
        env.from_collection([{"k": k, "n": v} for k, v in pairs])
        .key_by(lambda r: r["k"])
        .sum("n")
        .sink_to(FileSink(str(tmp_path / "dicts")))
    )
    result = env.execute("batch-reduce", executor="local")
    expected = _sums(pairs)
    for folder in ("reduce", "sum"):
        out = [tuple(r) for r in read_committed(str(tmp_path / folder))]
        assert sorted(out) == sorted(expected.items()), folder  # one line per key, nothing rolling
    assert sorted((r["k"], r["n"]) for r in read_committed(str(tmp_path / "dicts"))) == sorted(expected.items())
    assert result.completed_checkpoints == 1  # no periodic ones: only the final one, which commits the sinks


def test_the_same_job_in_streaming_mode_emits_every_update(checkpoint_dir, out_dir):
    pairs = [("a", 1), ("b", 2), ("a", 3)]
    env = _env(checkpoint_dir, RuntimeExecutionMode.STREAMING, p=1)
    env.from_collection(pairs).key_by(lambda kv: kv[0]).sum(1).sink_to(FileSink(out_dir))
    env.execute("streaming-sum", executor="local")
    assert sorted(tuple(r) for r in read_committed(out_dir)) == [("a", 1), ("a", 4), ("b", 2)]


def test_a_batch_reduce_in_a_harness_emits_nothing_before_the_end_and_stamps_max_watermark():
    h = OperatorHarness.reduce(lambda a, b: (a[0], a[1] + b[1]), lambda kv: kv[0], runtime_mode=BATCH)
    assert h.process(("a", 1), ("b", 2), timestamps=[5, 6]) == []
    assert h.process(("a", 3), timestamps=[7]) == []
    assert sorted(h.finish()) == [("a", 4), ("b", 2)]
    assert h.timestamps == [MAX_WATERMARK, MAX_WATERMARK]  # as Flink's batch reduce stamps its results
    untimed = OperatorHarness.reduce(lambda a, b: a + b, lambda v: v % 2, runtime_mode=BATCH)
    untimed.process(1, 2, 3)
    assert sorted(untimed.finish()) == [2, 4] and untimed.timestamps == [None, None]


# ---------------------------------------------------------------- event time and timers


class KeyAndWindow:
    """A window function: (key, window start, the aggregate)."""

    def apply(self, key, window, inputs):
        yield key, window.start, next(iter(inputs))


# The last record is far behind the others: in streaming mode the watermark has
# passed its window by the time it comes (a late record), in batch mode it has not.
CLICKS = [("ann", 1_000), ("bob", 30_000), ("ann", 61_000), ("bob", 62_000), ("ann", 125_000), ("ann", 2_000)]


def _click_counts(env: StreamExecutionEnvironment, folder: str, late_folder: str) -> None:
    ws = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e: e[1])
    late = OutputTag("late")
    source = env.from_generator(CLICKS.__getitem__, count=len(CLICKS), records_per_second=40, watermark_strategy=ws)
    counts = (
        source.set_parallelism(1)
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(60_000))
        .side_output_late_data(late)
        .aggregate(Count(), window_function=KeyAndWindow())
    )
    counts.sink_to(FileSink(folder))
    counts.get_side_output(late).sink_to(FileSink(late_folder))


def test_batch_event_time_windows_fire_at_the_end_with_every_record_counted(checkpoint_dir, tmp_path):
    env = _env(checkpoint_dir)
    env.set_auto_watermark_interval(1)  # ignored in batch: the watermark is perfect
    _click_counts(env, str(tmp_path / "counts"), str(tmp_path / "late"))
    env.execute("batch-windows", executor="local")
    expected = collections.Counter((user, ts - ts % 60_000) for user, ts in CLICKS)
    assert sorted(tuple(r) for r in read_committed(str(tmp_path / "counts"))) == sorted(
        (user, start, n) for (user, start), n in expected.items()
    )
    assert read_committed(str(tmp_path / "late")) == []


def test_in_streaming_mode_the_same_windows_drop_the_late_record(checkpoint_dir, tmp_path):
    """The control for the test above: its job does see a late record when watermarks come per record."""
    env = _env(checkpoint_dir, RuntimeExecutionMode.STREAMING)
    env.set_auto_watermark_interval(1)
    _click_counts(env, str(tmp_path / "counts"), str(tmp_path / "late"))
    env.execute("streaming-windows", executor="local")
    assert [tuple(r) for r in read_committed(str(tmp_path / "late"))] == [("ann", 2_000)]


class CountUntilTimer(KeyedProcessFunction):
    """Counts a key's records; a processing-time timer an hour ahead emits the count,
    and re-registers itself (a batch job's end ignores it: no endless loop)."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.INT()))

    def process_element(self, value, ctx):
        if self.count.value() is None:
            timers = ctx.timer_service()
            timers.register_processing_time_timer(timers.current_processing_time() + 3_600_000)
        self.count.update((self.count.value() or 0) + 1)
        return ()

    def on_timer(self, timestamp, ctx):
        ctx.timer_service().register_processing_time_timer(timestamp + 3_600_000)
        yield ctx.get_current_key(), self.count.value()


def test_batch_processing_time_timers_and_windows_fire_once_at_the_end(checkpoint_dir, tmp_path):
    words = [f"w{i % 13}" for i in range(2_000)]
    env = _env(checkpoint_dir)
    keyed = env.from_collection(words).key_by(lambda w: w)
    keyed.process(CountUntilTimer()).sink_to(FileSink(str(tmp_path / "timers")))
    (
        env.from_collection(words)
        .map(lambda w: (w, 1))
        .key_by(lambda kv: kv[0])
        .window(TumblingProcessingTimeWindows.of(3_600_000))
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(str(tmp_path / "windows")))
    )
    started = time.monotonic()
    env.execute("batch-timers", executor="local")
    assert time.monotonic() - started < 30  # no hour-long wait: processing time jumps to the end
    expected = sorted(collections.Counter(words).items())
    assert sorted(tuple(r) for r in read_committed(str(tmp_path / "timers"))) == expected
    windows = sorted(tuple(r) for r in read_committed(str(tmp_path / "windows")))
    # An hour-long window by the wall clock: the run may straddle two of them.
    assert sorted(_sums(windows).items()) == expected and len(windows) <= 2 * len(expected)


# ---------------------------------------------------------------- choosing the mode


def test_automatic_runs_bounded_jobs_in_batch_and_unbounded_ones_in_streaming(checkpoint_dir, out_dir):
    env = _env(checkpoint_dir, RuntimeExecutionMode.AUTOMATIC, p=1)
    env.enable_checkpointing(50)
    env.from_collection([("a", 1), ("a", 2)]).key_by(lambda kv: kv[0]).sum(1).sink_to(FileSink(out_dir))
    graph = env.get_job_graph("bounded")
    assert graph.runtime_mode is BATCH and graph.checkpointing.interval_ms is None
    env.execute("bounded", executor="local")
    assert [tuple(r) for r in read_committed(out_dir)] == [("a", 3)]

    env = _env(checkpoint_dir, RuntimeExecutionMode.AUTOMATIC, p=1)
    env.enable_checkpointing(50)
    env.from_generator(lambda i: i).sink_to(DiscardingSink())
    graph = env.get_job_graph("unbounded")
    assert graph.runtime_mode is RuntimeExecutionMode.STREAMING and graph.checkpointing.interval_ms == 50
    env = _env(checkpoint_dir, RuntimeExecutionMode.AUTOMATIC, p=1)
    env.enable_checkpointing(50)
    rolling = env.from_generator(lambda i: ("k", 1)).key_by(lambda kv: kv[0]).sum(1)
    assert rolling.execute_and_collect("unbounded", limit=3, executor="local") == [("k", 1), ("k", 2), ("k", 3)]


def test_batch_mode_refuses_an_unbounded_source_naming_it(checkpoint_dir):
    env = _env(checkpoint_dir)
    bounded = env.from_collection([1, 2])
    endless = env.from_generator(lambda i: i)
    bounded.union(endless).key_by(lambda i: i % 2).reduce(lambda a, b: a + b).print()
    with pytest.raises(
        InvalidConfigurationError, match=r"runtime_mode='BATCH'.*, and 'Source: generator' does not"
    ) as e:
        env.execute("endless", executor="local")
    assert "count=" in str(e.value) and "STREAMING or AUTOMATIC" in str(e.value)


def test_set_runtime_mode_takes_the_enum_only():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidConfigurationError, match="runtime_mode='BATCH'.*RuntimeExecutionMode"):
        env.set_runtime_mode("BATCH")  # type: ignore[arg-type]


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize("vertex", ["reduce", "source-generator"])
def test_a_task_killed_in_a_batch_job_reruns_it_and_the_output_is_exact_once(checkpoint_dir, out_dir, vertex):
    """No checkpoint before the end: the job restarts from its start, and the
    file sink publishes once, at the end (the first attempt's files are dropped)."""
    n = 12_000
    env = _env(checkpoint_dir)
    (
        env.from_generator(lambda i: (i % 50, i), count=n, records_per_second=12_000)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("batch-kill", executor="local")

    def reduced() -> int:
        return sum(m["records_in"] for m in client.metrics() if m["task"].startswith("reduce/"))

    while reduced() < n // 4:  # a quarter of the input is in the reduce's state
        assert not client.status().is_terminal
        threading.Event().wait(0.005)
    client.kill_task(vertex, 0)
    result = client.wait(60)
    assert result.restarts == 1 and result.completed_checkpoints == 1
    out = sorted(tuple(r) for r in read_committed(out_dir))
    assert out == sorted(_sums((i % 50, i) for i in range(n)).items())  # each key once, its exact sum


@pytest.mark.parametrize("trigger", ["close", "commit", "kill"])
def test_a_failover_after_the_final_checkpoint_commits_each_final_value_once(
    checkpoint_dir, out_dir, tmp_path, monkeypatch, trigger
):
    """The reduce emitted its totals from finish() and the sink pre-committed them
    in the final checkpoint; the restore from it must not run finish() again (it
    did: every total twice). ``kill``: a task dies once that checkpoint is on
    storage, before it hears so."""
    mark = str(tmp_path / "failed-once")
    env = batch_keyed_sum(checkpoint_dir, out_dir, trigger, mark)
    if trigger == "kill":
        client: list = []

        def written_then_killed(location, metadata, write=checkpoint_flow.write_metadata):
            write(location, metadata)
            if first_time(mark):
                client[0].kill_task("sum", 0)

        monkeypatch.setattr(checkpoint_flow, "write_metadata", written_then_killed)
        client.append(env.execute_async("final-fault", executor="local"))
        result = client[0].wait(60)
    else:
        result = env.execute("final-fault", executor="local")
    assert os.path.exists(mark)  # the fault happened
    assert result.status is JobStatus.FINISHED and result.restarts == 1
    assert committed_totals(out_dir) == expected_totals()


def test_a_restore_with_the_reduce_fully_finished_leaves_no_rocksdb_folder(checkpoint_dir, out_dir, tmp_path):
    """After the final checkpoint a close() fails: the restored reduce is fully
    finished, so it is never opened, but it made its RocksDB folder. Only opened
    operators were closed, so that folder (with its hard links to checkpoint
    files) stayed for the life of the process (found by the 50-kill drill on Ray)."""
    rocks = tmp_path / "rocksdb"
    backend = EmbeddedRocksDBStateBackend()
    backend.set_db_storage_path(str(rocks))
    env = batch_keyed_sum(checkpoint_dir, out_dir, "close", str(tmp_path / "failed-once"))
    env.set_state_backend(backend)
    result = env.execute("final-fault-rocksdb", executor="local")
    assert result.status is JobStatus.FINISHED and result.restarts == 1
    assert committed_totals(out_dir) == expected_totals()
    assert os.listdir(rocks) == []


# ---------------------------------------------------------------- a PyFlink program

# Its imports in PyFlink: from pyflink.common import Encoder, Types
#                        from pyflink.datastream import StreamExecutionEnvironment, RuntimeExecutionMode
#                        from pyflink.datastream.connectors.file_system import FileSink, OutputFileConfig, RollingPolicy
POEM = ["The rain in Spain", "stays mainly in the plain", "in Spain it rains"]
WORD_FILES = OutputFileConfig.builder().with_part_prefix("words").with_part_suffix(".txt").build()


def batch_word_count(lines, output_path):
    """The shape of PyFlink's examples/datastream/word_count.py: BATCH mode,
    a collection, flat_map, a typed map to (word, 1), key_by, reduce, and print
    or a row-format FileSink."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(2)
    ds = env.from_collection(lines)

    def split(line):
        yield from line.split()

    ds = (
        ds.flat_map(split)
        .map(lambda w: (w, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
        .key_by(lambda w: w[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
    )
    if output_path is not None:
        ds.sink_to(
            sink=FileSink.for_row_format(base_path=output_path, encoder=Encoder.simple_string_encoder())
            .with_output_file_config(WORD_FILES)
            .with_rolling_policy(RollingPolicy.default_rolling_policy())
            .build()
        )
    else:
        ds.print()
    env.execute()


def test_pyflinks_batch_word_count_gives_one_line_per_word(monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("WEIR_EXECUTOR", "local")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the default checkpoint storage is in the temp folder
    expected = sorted(str(pair) for pair in collections.Counter(" ".join(POEM).split()).items())
    out = str(tmp_path / "counts")
    batch_word_count(POEM, out)
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).with_output_file_config(WORD_FILES).build()
    assert sorted(read_committed(sink)) == expected
    capfd.readouterr()
    batch_word_count(POEM, None)
    # As PyFlink prints at parallelism 2: "<subtask from 1>> ", then the TUPLE as Java's Tuple2.toString().
    printed = [line.split("> ", 1)[1] for line in capfd.readouterr().out.splitlines() if "> " in line]
    assert sorted(printed) == sorted(f"({word},{n})" for word, n in collections.Counter(" ".join(POEM).split()).items())
