"""``map_batches`` (#17 item 9), Ray Data's name: a function over batches of rows
in pyarrow, pandas or numpy form, against a plain-Python reference on the
in-process executor; a partial batch goes before every checkpoint barrier, so a
job with killed tasks commits every row once; misuse names the operator."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.kills import kill_each_after_checkpoints
from tests.pausing import GatedGenerator
from weir import (
    DiscardingSink,
    InvalidConfigurationError,
    JobExecutionError,
    RestartStrategy,
    StreamExecutionEnvironment,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.batches import MapBatchesOperator
from weir.runtime.testing import OperatorHarness


def _rows(n):
    return [{"id": i, "x": i % 97, "name": f"r{i}"} for i in range(n)]


def _reference(rows):
    return sorted((r["id"], r["x"] * 2 + 1) for r in rows if r["x"] % 3)


def double_arrow(table):
    assert isinstance(table, pa.Table)
    kept = table.filter(pc.not_equal(pc.subtract(table["x"], pc.multiply(pc.divide(table["x"], 3), 3)), 0))
    return kept.append_column("y", pc.add(pc.multiply(kept["x"], 2), 1))


def double_pandas(df):
    kept = df[df["x"] % 3 != 0]
    return kept.assign(y=kept["x"] * 2 + 1)


def double_numpy(batch):
    keep = batch["x"] % 3 != 0
    return {"id": batch["id"][keep], "y": batch["x"][keep] * 2 + 1}


@pytest.mark.parametrize("fmt,fn", [("pyarrow", double_arrow), ("pandas", double_pandas), ("numpy", double_numpy)])
def test_each_batch_format_matches_the_reference(fmt, fn):
    rows = _rows(5_000)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    out = env.from_collection(rows).map_batches(fn, batch_size=128, batch_format=fmt)
    got = out.execute_and_collect(executor="local", limit=10_000)
    assert sorted((r["id"], r["y"]) for r in got) == _reference(rows)
    assert all(type(r["y"]) is int for r in got)  # plain Python values again, not numpy scalars


class Sizes:
    """Notes the size of every batch it sees; passes rows through."""

    def __init__(self):
        self.sizes = []

    def __call__(self, table):
        self.sizes.append(table.num_rows)
        return table


def _harness(fn, batch_size=4, timeout_ms=None, fmt="pyarrow"):
    return OperatorHarness(MapBatchesOperator("MapBatches", "mb", fn, batch_size, fmt, timeout_ms))


def test_a_partial_batch_goes_before_the_barrier_a_watermark_the_end_and_its_timeout():
    fn = Sizes()
    h = _harness(fn)
    assert h.process(*[{"i": i} for i in range(10)]) == [{"i": i} for i in range(8)]
    snap = h.snapshot(1)  # the checkpoint takes the last 2 rows first
    assert h.output[8:] == [{"i": 8}, {"i": 9}] and fn.sizes == [4, 4, 2]
    assert not snap.summary().has_state  # no rows held in the snapshot
    h.process({"i": 10})
    assert h.watermark(5) == [{"i": 10}] and fn.sizes[-1] == 1
    h.process({"i": 11})
    assert h.finish() == [{"i": 11}]
    fn = Sizes()
    h = _harness(fn, timeout_ms=50)
    h.process({"i": 0})
    due = h.operator.next_processing_timer()
    assert due is not None and h.processing_time(due - 1) == [] and h.processing_time(due) == [{"i": 0}]
    assert h.operator.next_processing_timer() is None


def test_rows_keep_their_timestamps_or_take_the_batch_latest():
    h = _harness(lambda t: t, batch_size=3)
    h.process({"v": 1}, {"v": 2}, {"v": 3}, timestamps=[30, 10, 20])
    assert h.timestamps == [30, 10, 20]
    h = _harness(lambda t: t.slice(0, 1), batch_size=3)
    h.process({"v": 1}, {"v": 2}, {"v": 3}, timestamps=[30, 10, 20])
    assert h.output == [{"v": 1}] and h.timestamps == [30]


class Model:
    """A callable class, as Ray Data's: constructed once per subtask."""

    def __init__(self, scale, offset=0):
        self.scale, self.offset = scale, offset

    def __call__(self, batch):
        return {"y": batch["x"] * self.scale + self.offset}


def test_a_callable_class_is_built_once_per_subtask_and_gpus_are_asked_for():
    h = OperatorHarness(MapBatchesOperator("MapBatches", "mb", Model, 2, "numpy", None, (10,), {"offset": 1}))
    assert h.process({"x": 1}, {"x": 2}) == [{"y": 11}, {"y": 21}] and isinstance(h.operator._call, Model)
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_collection(_rows(10))
    stream.map_batches(Model, fn_constructor_args=(2,), num_gpus=1).name("infer").sink_to(DiscardingSink())
    stream.map_batches(Model, fn_constructor_args=(3,)).name("infer2").with_resources(num_gpus=0.5).sink_to(
        DiscardingSink()
    )
    vertices = {v.id: v for v in env.get_job_graph().vertices.values()}
    assert vertices["infer"].resources["num_gpus"] == 1 and vertices["infer2"].resources["num_gpus"] == 0.5


def test_misuse_names_the_operator_and_the_setting():
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_collection(_rows(10))
    with pytest.raises(InvalidConfigurationError, match="map_batches batch_format='arrow'.*pyarrow"):
        stream.map_batches(lambda b: b, batch_format="arrow")
    with pytest.raises(InvalidConfigurationError, match="map_batches batch_size"):
        stream.map_batches(lambda b: b, batch_size=0)
    with pytest.raises(InvalidConfigurationError, match="fn is not a class"):
        stream.map_batches(lambda b: b, fn_constructor_args=(1,))
    with pytest.raises(
        Exception,
        match=r"map_batches function of operator \'MapBatches\' raised TypeError: returned list, "
        r'not a batch of batch_format="pandas" \(a pandas.DataFrame\)',
    ):
        _harness(lambda df: list(df.index), fmt="pandas").process(*[{"x": 1}] * 4)
    with pytest.raises(
        Exception,
        match=r"returned dict, not a batch of batch_format=\"numpy\" \(a dict of numpy arrays of one length\)",
    ):
        _harness(lambda b: {"x": [1, 2, 3, 4]}, fmt="numpy").process(*[{"x": 1}] * 4)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_sequence(1, 10).map_batches(lambda t: t).name("vectorised").sink_to(DiscardingSink())
    with pytest.raises(
        JobExecutionError, match=r"of operator 'vectorised' raised TypeError: map_batches takes rows \(dicts\), got int"
    ):
        env.execute("not-rows", executor="local")


def test_a_map_batches_job_is_exact_after_its_tasks_are_killed(checkpoint_dir, out_dir, tmp_path):
    n = 60_000
    rows = _rows(n)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    # Batches of 1,000 at 30,000 rows/s: every barrier finds a partial batch,
    # which only the flush before the snapshot saves from being lost. Half the
    # input comes so, the rest once both kills landed.
    gate = tmp_path / "killed"
    (
        env.from_source(GatedGenerator(lambda i: rows[i], n, str(gate), n // 2, 30_000), source_name="generator")
        .set_parallelism(1)
        .rebalance()
        .map_batches(double_pandas, batch_size=1_000, batch_format="pandas", batch_timeout_ms=None)
        .name("batches")
        .map(lambda r: (r["id"], r["y"]))
        .sink_to(FileSink(out_dir))
    )
    client = env.execute_async("map-batches-kill", executor="local")
    kill_each_after_checkpoints(client, "batches")
    gate.touch()
    assert client.wait(120).restarts == 2
    assert sorted(map(tuple, read_committed(out_dir))) == _reference(rows)
