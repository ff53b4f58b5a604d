"""FileSink's two-phase commit, driven through the sink operator by hand."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir import InvalidConfigurationError, StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed
from weir.runtime.state import OperatorSnapshot
from weir.runtime.testing import OperatorHarness


def _sink_op(path: str, fmt: str, attempt: str, restored: OperatorSnapshot | None = None) -> OperatorHarness:
    return OperatorHarness.sink(
        FileSink(path, format=fmt), attempt_id=attempt, restore=None if restored is None else [restored]
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_nothing_is_visible_before_the_checkpoint_completes(tmp_path, fmt):
    path = str(tmp_path / "out")
    op = _sink_op(path, fmt, "a1")
    op.process({"k": 1, "v": 2}, {"k": 3, "v": 4})
    assert read_committed(path) == []
    op.snapshot(1)
    assert read_committed(path) == []
    assert any(n.endswith(".pending") for n in os.listdir(path))
    op.notify_complete(1)
    assert read_committed(path) == [{"k": 1, "v": 2}, {"k": 3, "v": 4}]


def test_restore_commits_what_was_pending_and_cleans_up_leftovers(tmp_path):
    path = str(tmp_path / "out")
    op = _sink_op(path, "jsonl", "a1")
    op.process([1, 1])
    snap = op.snapshot(1)  # pending, but the notification never comes
    op.process([2, 2])  # in progress when the task dies
    op.snapshot(2)  # pending of a checkpoint that never completes
    op.process([3, 3])
    # A new attempt restores checkpoint 1.
    new = _sink_op(path, "jsonl", "b2", snap)
    assert read_committed(path) == [[1, 1]]
    new.process([2, 2])
    new.snapshot(3)
    new.notify_complete(3)
    assert sorted(read_committed(path)) == [[1, 1], [2, 2]]
    hidden = [n for n in os.listdir(path) if n.startswith(".")]
    assert hidden == [], "leftovers of attempt a1 must be removed after the first completed checkpoint"


def test_a_subtask_cleans_only_its_own_leftovers_and_those_of_removed_subtasks(tmp_path):
    """After region failover subtasks run different attempts: a restarted subtask
    must not delete a live one's unpublished files."""
    path = str(tmp_path / "out")
    live = OperatorHarness.sink(FileSink(path), attempt_id="a1", subtask=1, parallelism=2)
    live.process([1, 1])
    live.snapshot(1)  # pending, committed at checkpoint 1
    live.process([2, 2])  # in progress
    gone = OperatorHarness.sink(FileSink(path), attempt_id="a0", subtask=3, parallelism=4)
    gone.process([9, 9])  # a subtask a rescale to 2 removed
    old = OperatorHarness.sink(FileSink(path), attempt_id="a0", subtask=0, parallelism=2)
    old.process([0, 0])  # subtask 0's attempt that died
    restarted = OperatorHarness.sink(FileSink(path), attempt_id="b2", subtask=0, parallelism=2)
    restarted.snapshot(1)
    restarted.notify_complete(1)
    hidden = sorted(n for n in os.listdir(path) if n.startswith("."))
    assert [n.split("-")[1:3] for n in hidden] == [["a1", "1"], ["a1", "1"]]
    live.notify_complete(1)
    live.snapshot(2)
    live.notify_complete(2)
    assert sorted(read_committed(path)) == [[1, 1], [2, 2]]


def test_a_run_never_cleans_up_the_files_another_run_left_for_its_savepoint(tmp_path):
    """A job stopped with a savepoint leaves its pending files for the savepoint to
    publish. A later job on the same folder (or a new run of the same job, not
    restored) cleans up only its own leftovers, so the savepoint still restores."""
    path = str(tmp_path / "out")
    stopped = OperatorHarness.sink(FileSink(path), attempt_id="a1", run_id="r1")
    stopped.process([1, 1])
    savepoint = stopped.snapshot(1)  # pending: the savepoint publishes it
    later = OperatorHarness.sink(FileSink(path), attempt_id="b1", run_id="r2")
    later.process([2, 2])
    later.snapshot(1)
    later.notify_complete(1)  # its first checkpoint: its cleanup runs
    assert read_committed(path) == [[2, 2]]
    resumed = OperatorHarness.sink(FileSink(path), attempt_id="c1", run_id="r3", restore=[savepoint])
    resumed.snapshot(2)
    resumed.notify_complete(2)
    assert sorted(read_committed(path)) == [[1, 1], [2, 2]]


def test_commit_is_idempotent(tmp_path):
    path = str(tmp_path / "out")
    op = _sink_op(path, "jsonl", "a1")
    op.process([1, 1])
    snap = op.snapshot(1)
    op.notify_complete(1)
    _sink_op(path, "jsonl", "b2", snap)
    assert read_committed(path) == [[1, 1]]


def test_unknown_format_is_refused():
    with pytest.raises(InvalidConfigurationError, match="FileSink format='csv'"):
        FileSink("/tmp/x", format="csv")


def test_two_file_sinks_of_a_job_on_one_folder_are_refused_naming_it(tmp_path):
    """Issue #13 item 6: they picked the same part-file names; one committed file
    held both sinks' rows and the job failed."""
    from weir import InvalidJobGraphError

    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = env.from_collection([1, 2, 3])
    numbers.sink_to(FileSink(str(tmp_path / "out")))
    numbers.map(lambda x: -x).sink_to(FileSink(str(tmp_path / "other")))  # another folder: fine
    with pytest.raises(
        InvalidJobGraphError,
        match=rf"two sinks of this job write to folder {tmp_path}/out \(Sink: FileSink and another FileSink\)",
    ):
        numbers.map(lambda x: x * 2).sink_to(FileSink(str(tmp_path / "out") + "/"))


# ------------------------------------------------------------------ PyFlink's builders
def _lines_sink(path, prefix="words", suffix=".txt", policy=None):
    from weir.connectors.files import Encoder, OutputFileConfig, RollingPolicy

    return (
        FileSink.for_row_format(path, Encoder.simple_string_encoder())
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix(prefix).with_part_suffix(suffix).build())
        .with_rolling_policy(policy or RollingPolicy.on_checkpoint_rolling_policy())
        .build()
    )


def test_a_row_format_sink_writes_str_lines_named_by_its_output_file_config(tmp_path):
    path = str(tmp_path / "out")
    sink = _lines_sink(path)
    op = OperatorHarness.sink(sink, attempt_id="a1")
    op.process("ann", 7, (1, "b"))
    op.snapshot(1)
    op.notify_complete(1)
    assert os.listdir(path) == ["words-a1-0-0.txt"]
    assert read_committed(sink) == ["ann", "7", "(1, 'b')"]
    assert read_committed(path) == []  # a bare path reads FileSink(path)'s part-... files only


def test_the_default_rolling_policy_rolls_at_part_size_and_commits_at_the_checkpoint(tmp_path):
    from weir.connectors.files import RollingPolicy

    path = str(tmp_path / "out")
    sink = _lines_sink(path, policy=RollingPolicy.default_rolling_policy(part_size=10))
    op = OperatorHarness.sink(sink, attempt_id="a1")
    op.process("abcd", "efgh", "ijkl")  # 5 bytes each: the first two fill a file
    assert read_committed(sink) == []  # rolled, but pending until the checkpoint completes
    op.snapshot(1)
    op.notify_complete(1)
    assert sorted(os.listdir(path)) == ["words-a1-0-0.txt", "words-a1-0-1.txt"]
    assert read_committed(sink) == ["abcd", "efgh", "ijkl"]


def test_a_restore_cleans_the_leftovers_of_a_custom_prefix_and_keeps_what_it_committed(tmp_path):
    from weir.connectors.files import RollingPolicy

    path = str(tmp_path / "out")
    policy = RollingPolicy.default_rolling_policy(part_size=10)
    op = OperatorHarness.sink(_lines_sink(path, prefix="out", suffix="", policy=policy), attempt_id="a1")
    op.process("abcd")
    snap = op.snapshot(1)  # pending; the notification never comes
    op.process("efgh", "ijkl", "mnop")  # one file rolled to pending, one in progress: then the task dies
    restored = _lines_sink(path, prefix="out", suffix="", policy=policy)
    new = OperatorHarness.sink(restored, attempt_id="b2", restore=[snap])
    new.process("efgh")
    new.snapshot(2)
    new.notify_complete(2)
    assert sorted(read_committed(restored)) == ["abcd", "efgh"]
    assert [n for n in os.listdir(path) if n.startswith(".")] == []


def test_a_bulk_format_sink_writes_parquet_and_rolls_only_at_checkpoints(tmp_path):
    import pyarrow as pa

    from weir.connectors.files import OutputFileConfig, RollingPolicy
    from weir.connectors.formats import ParquetBulkWriters

    path = str(tmp_path / "out")
    schema = pa.schema([("user", pa.string()), ("clicks", pa.int32())])
    builder = FileSink.for_bulk_format(path, ParquetBulkWriters.for_row_type(schema))
    with pytest.raises(InvalidConfigurationError, match="a bulk format rolls at checkpoints only"):
        builder.with_rolling_policy(RollingPolicy.default_rolling_policy())
    sink = (
        builder.with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy())
        .with_output_file_config(OutputFileConfig("clicks", ".parquet"))
        .build()
    )
    op = OperatorHarness.sink(sink, attempt_id="a1")
    op.process({"user": "ann", "clicks": 3}, {"user": "bob", "clicks": 4})
    op.snapshot(1)
    op.notify_complete(1)
    assert read_committed(sink) == [{"user": "ann", "clicks": 3}, {"user": "bob", "clicks": 4}]
    (name,) = os.listdir(path)
    assert name.startswith("clicks-a1-0-0") and pq.read_schema(os.path.join(path, name)) == schema


def test_builders_refuse_what_they_cannot_write_naming_the_setting():
    from weir.connectors.files import Encoder, OutputFileConfig, RollingPolicy

    with pytest.raises(InvalidConfigurationError, match="OutputFileConfig part_prefix='_part'.*hidden"):
        OutputFileConfig.builder().with_part_prefix("_part").build()
    with pytest.raises(InvalidConfigurationError, match="RollingPolicy part_size=0"):
        RollingPolicy.default_rolling_policy(part_size=0)
    with pytest.raises(TypeError, match="for_row_format\\(\\) takes an Encoder"):
        FileSink.for_row_format("/tmp/x", "utf-8")
    with pytest.raises(InvalidConfigurationError, match="charset_name='klingon'"):
        Encoder.simple_string_encoder("klingon")


# ------------------------------------------------------------------ a batch's bytes, record by record
_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    # Text that looks like the places between records: "], [", "}, {", newlines, quotes.
    | st.text(alphabet=st.sampled_from(list('ab], [}{"\\\n\u00e9\U0001f600')), max_size=8)
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(alphabet="ab]}, [{", max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_json_records = (
    st.lists(st.tuples(st.integers(), st.integers()), max_size=20)
    | st.lists(st.lists(_json_values, max_size=3) | st.tuples(_json_values, _json_values), max_size=8)
    | st.lists(st.dictionaries(st.text(max_size=3), _json_values, max_size=3), max_size=8)
    | st.lists(_json_values, max_size=8)
)


@settings(max_examples=200, deadline=None)
@given(records=_json_records)
def test_a_json_lines_batch_is_the_bytes_of_its_records_one_by_one(records):
    """One json.dumps of the batch, split where the records meet, or record by record:
    the bytes are those of ``encode`` on each record (hypothesis prints a failing
    batch, and replays it from its database)."""
    from weir.connectors.files import JsonLinesEncoder

    encoder = JsonLinesEncoder()
    assert encoder.encode_batch(records) == b"".join(encoder.encode(r) for r in records)


@settings(max_examples=100, deadline=None)
@given(records=st.lists(_json_values, max_size=8), charset=st.sampled_from(["UTF-8", "latin-1", "ascii", "UTF-16"]))
def test_a_simple_string_batch_is_the_bytes_of_its_records_one_by_one(records, charset):
    """In every charset (UTF-16 starts each record with a byte-order mark), and a
    record the charset cannot encode fails as ``encode`` fails on it."""
    from weir.connectors.files import Encoder

    encoder = Encoder.simple_string_encoder(charset)
    try:
        expected = b"".join(encoder.encode(r) for r in records)
    except UnicodeEncodeError as exc:
        with pytest.raises(UnicodeEncodeError) as raised:
            encoder.encode_batch(records)
        assert str(raised.value) == str(exc)
    else:
        assert encoder.encode_batch(records) == expected


def test_a_batch_json_cannot_encode_fails_on_its_record_as_encode_does():
    from weir.connectors.files import JsonLinesEncoder

    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        JsonLinesEncoder().encode_batch([(1, 2), (3, {4})])


def test_a_subclass_encode_decides_the_bytes_of_a_batch(tmp_path):
    """An encoder that overrides ``encode`` (and not ``encode_batch``) is called
    once per record, in order, on both the plain and the rolling path."""
    from weir.connectors.files import JsonLinesEncoder, RollingPolicy

    seen = []

    class Upper(JsonLinesEncoder):
        def encode(self, value):
            seen.append(value)
            return super().encode(value).upper()

    assert Upper().encode_batch(["a", ["b"]]) == b'"A"\n["B"]\n'
    path = str(tmp_path / "out")
    for policy in (RollingPolicy.on_checkpoint_rolling_policy(), RollingPolicy.default_rolling_policy(part_size=8)):
        seen.clear()
        sink = FileSink.for_row_format(path, Upper()).with_rolling_policy(policy).build()
        op = OperatorHarness.sink(sink, attempt_id="a1")
        op.process("ab", "cd", "ef")
        assert seen == ["ab", "cd", "ef"]


def test_json_lines_roll_at_part_size_after_the_same_record_as_one_by_one(tmp_path):
    """The batch path writes a file up to the record that brings it to part_size,
    then rolls, as record by record: the same files with the same bytes."""
    from weir.connectors.files import JsonLinesEncoder, RollingPolicy

    path = str(tmp_path / "out")
    sink = (
        FileSink.for_row_format(path, JsonLinesEncoder())
        .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=20))
        .build()
    )
    op = OperatorHarness.sink(sink, attempt_id="a1")
    op.process([1, 2], [3, 4])  # 7 bytes each: 14, under 20, in the open file
    op.process([5, 6], [7, 8], [9, 10])  # the file reaches 21 at [5, 6] and rolls; [7, 8] and [9, 10] start the next
    op.snapshot(1)
    op.notify_complete(1)
    files = sorted(os.listdir(path))
    assert files == ["part-a1-0-0", "part-a1-0-1"]
    assert [open(os.path.join(path, f), "rb").read() for f in files] == [
        b"[1, 2]\n[3, 4]\n[5, 6]\n",
        b"[7, 8]\n[9, 10]\n",
    ]


@pytest.mark.parametrize(
    "rows",
    [
        [(i % 7, 2 * i) for i in range(70_000)],  # past a row group: two groups
        [(1, "a"), [2, "b"], (3, None)],  # tuples and lists
        [(1, 2, 3), (4, 5)],  # rows of two widths: zip cuts to the shortest
        [("a", "b"), "cd"],  # a str row: zip iterates it
    ],
)
def test_parquet_columns_by_index_write_the_bytes_zip_wrote(tmp_path, monkeypatch, rows):
    """Columns are taken by index where every row is a tuple or list of one width;
    the file's bytes are those ``zip(*rows)``'s columns gave."""
    import weir.connectors.files as files

    assert [list(c) for c in files._columns(rows)] == [list(c) for c in zip(*rows)]

    def written(folder: str) -> bytes:
        op = OperatorHarness.sink(FileSink(str(tmp_path / folder), format="parquet"), attempt_id="a1")
        for i in range(0, len(rows), 1000):
            op.process(*rows[i : i + 1000])
        op.snapshot(1)
        op.notify_complete(1)
        (name,) = os.listdir(tmp_path / folder)
        return (tmp_path / folder / name).read_bytes()

    by_index = written("by-index")
    monkeypatch.setattr(files, "_columns", lambda rows: list(zip(*rows)))
    assert by_index == written("by-zip")


def test_a_circular_record_in_a_batch_fails_as_json_dumps_fails_on_it():
    from weir.connectors.files import JsonLinesEncoder

    loop: list = [1]
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference detected"):
        JsonLinesEncoder().encode_batch([[0], loop])
