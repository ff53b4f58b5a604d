"""FileSource (#15): each format against plain Python, readers resuming mid-file,
the enumerator by hand, a watched folder with files arriving while tasks are
killed, stop-with-savepoint and a rescaled resume, and the errors bad input gives."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.checker import check_running_sums
from tests.kills import kill_each_after_checkpoints
from tests.pausing import PausingReader
from weir import (
    Duration,
    InvalidConfigurationError,
    JobExecutionError,
    MalformedInputError,
    RestartStrategy,
    StreamExecutionEnvironment,
    WatermarkStrategy,
)
from weir.connectors import formats
from weir.connectors.file_source import FileEnumerator, FileEnumeratorState, FileReader, list_files
from weir.connectors.files import FileSink, FileSource, StreamFormat, read_committed
from weir.connectors.formats import CsvReaderFormat, CsvSchema, ParquetColumnarRowInputFormat
from weir.runtime.events import Watermark
from weir.runtime.operators import OperatorContext, Output, RestoredState
from weir.runtime.sources import AddSplits, NoMoreSplits, SourceOperator
from weir.runtime.storage import handle_from_json, read_metadata, read_state


def _publish(path: str, data: bytes) -> None:
    """Write a file as producers should: under a hidden name, then rename it."""
    folder, name = os.path.split(path)
    hidden = os.path.join(folder, "." + name + ".tmp")
    with open(hidden, "wb") as f:
        f.write(data)
    os.replace(hidden, path)


# ------------------------------------------------------------------ formats, each against plain Python
def _text(folder: str) -> tuple[StreamFormat, list[Any]]:
    expected = []
    for i in range(3):
        lines = [f"file {i} line {j} é" for j in range(40)]
        expected += lines
        _publish(
            os.path.join(folder, f"t{i}.txt"), ("\r\n" if i == 1 else "\n").join(lines).encode()
        )  # the last has no \n
    lines = [f"zipped {j}" for j in range(30)]
    expected += lines
    os.makedirs(os.path.join(folder, "zz"))  # folders are read recursively
    _publish(os.path.join(folder, "zz", "z.txt.gz"), gzip.compress(("\n".join(lines) + "\n").encode()))
    return StreamFormat.text_line_format(), expected


def _json_lines(folder: str) -> tuple[StreamFormat, list[Any]]:
    records = [{"user": f"u{i % 7}", "amount": i, "tags": ["a", str(i)]} for i in range(90)]
    for i in range(3):
        body = "\n".join(json.dumps(r) for r in records[i * 30 : (i + 1) * 30])
        _publish(os.path.join(folder, f"j{i}.jsonl"), (body + "\n\n").encode())  # a blank line is skipped
    return StreamFormat.json_lines_format(), records


CSV_SCHEMA = (
    CsvSchema.builder()
    .add_number_column("id")
    .add_string_column("name")
    .add_number_column("price", number_type=float)
    .add_boolean_column("ok")
    .add_array_column("tags", separator="|")
    .set_use_header()
    .set_strict_headers()
    .build()
)


def _csv(folder: str) -> tuple[StreamFormat, list[Any]]:
    expected = []
    for i in range(3):
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(["id", "name", "price", "ok", "tags"])
        for j in range(25):
            n = i * 100 + j
            name = f"item {n}" if j % 5 else f'quoted, "multi"\nline {n}'  # a quoted field over two lines
            price = "" if j == 3 else f"{n}.5"  # an empty number is None
            w.writerow([n, name, price, "true" if j % 2 else "FALSE", "a|b" if j % 4 else "x"])
            expected.append(
                {
                    "id": n,
                    "name": name,
                    "price": None if j == 3 else n + 0.5,
                    "ok": bool(j % 2),
                    "tags": ["a", "b"] if j % 4 else ["x"],
                }
            )
        _publish(os.path.join(folder, f"c{i}.csv"), out.getvalue().encode())
    return CsvReaderFormat.for_schema(CSV_SCHEMA), expected


PARQUET_TYPE = pa.schema([("id", pa.int64()), ("score", pa.float64())])


def _parquet(folder: str) -> tuple[ParquetColumnarRowInputFormat, list[Any]]:
    expected = []
    for i in range(2):
        rows = [{"id": i * 1000 + j, "score": j / 4, "dropped": "x"} for j in range(250)]
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(folder, f"p{i}.parquet"), row_group_size=60)
        expected += [{"id": r["id"], "score": r["score"]} for r in rows]  # row_type reads two columns
    return ParquetColumnarRowInputFormat(PARQUET_TYPE, batch_size=50), expected


FORMATS = {"text": _text, "jsonl": _json_lines, "csv": _csv, "parquet": _parquet}


def _source(fmt: Any, *paths: str, monitor_ms: int | None = None) -> FileSource:
    builder = (
        FileSource.for_bulk_file_format(fmt, *paths)
        if isinstance(fmt, ParquetColumnarRowInputFormat)
        else FileSource.for_record_stream_format(fmt, *paths)
    )
    return (builder if monitor_ms is None else builder.monitor_continuously(monitor_ms)).build()


def _env(checkpoint_dir: str, parallelism: int = 2, interval_ms: int = 50) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    return env


def _key(record: Any) -> str:
    return json.dumps(record, sort_keys=True)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_bounded_source_reads_every_visible_file_once(checkpoint_dir, tmp_path, name):
    folder = str(tmp_path / "in")
    os.makedirs(folder)
    fmt, expected = FORMATS[name](folder)
    _publish(os.path.join(folder, "_SUCCESS"), b"not data")
    _publish(os.path.join(folder, ".hidden"), b"not data")
    out = str(tmp_path / "out")
    env = _env(checkpoint_dir)
    env.from_source(_source(fmt, folder), WatermarkStrategy.no_watermarks(), "files").sink_to(FileSink(out))
    env.execute(f"bounded-{name}", executor="local")
    assert sorted(map(_key, read_committed(out))) == sorted(map(_key, expected))


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_reader_resumes_mid_file_from_its_snapshot(tmp_path, name):
    """Every few records the reader's splits go through a snapshot into a new
    reader, as a restore does: each record comes once, in file order."""
    folder = str(tmp_path / "in")
    os.makedirs(folder)
    fmt, expected = FORMATS[name](folder)
    files = [f.split for f in list_files([folder])]
    reader = FileReader(fmt)
    reader.add_splits(files)
    got, resumed_mid_file = [], 0
    while True:
        poll = reader.poll(7)
        if poll.end:
            break
        got += poll.records
        splits = reader.snapshot_splits()
        resumed_mid_file += bool(splits) and (splits[0].offset > 0 or splits[0].records > 0)
        reader.close()
        reader = FileReader(fmt)
        reader.add_splits(splits)
    assert got == expected and resumed_mid_file >= 5


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_a_monitored_source_reads_files_moved_in_while_the_job_runs(checkpoint_dir, tmp_path, name):
    stage, folder, out = str(tmp_path / "stage"), str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(stage)
    os.makedirs(folder)
    fmt, expected = FORMATS[name](stage)
    env = _env(checkpoint_dir)
    source = _source(fmt, folder, monitor_ms=Duration.of_millis(20))
    env.from_source(source, WatermarkStrategy.no_watermarks(), "watched").sink_to(FileSink(out))
    client = env.execute_async(f"watched-{name}", executor="local")
    for entry in sorted(os.listdir(stage)):  # one at a time, each whole at once, each once the last was read
        before = len(read_committed(out))
        os.replace(os.path.join(stage, entry), os.path.join(folder, entry))
        client.wait_until(lambda c, before=before: len(read_committed(out)) > before)
    client.wait_until(lambda c: len(read_committed(out)) >= len(expected))
    assert not client.status().is_terminal  # an unbounded source never ends
    client.cancel()
    assert sorted(map(_key, read_committed(out))) == sorted(map(_key, expected))


# ------------------------------------------------------------------ the enumerator, by hand
class _Context:
    parallelism = 2

    def __init__(self) -> None:
        self.events: list[tuple[int, Any]] = []
        self.calls: list[tuple[Any, Any, float | None]] = []

    def assign_splits(self, subtask: int, splits: list[Any]) -> None:
        self.events.append((subtask, AddSplits(splits)))

    def signal_no_more_splits(self, subtask: int) -> None:
        self.events.append((subtask, NoMoreSplits()))

    def call_async(self, call: Any, handler: Any, period_s: float | None = None) -> None:
        self.calls.append((call, handler, period_s))

    def run_calls(self) -> None:
        for call, handler, _ in self.calls:
            handler(call(), None)


def test_a_monitored_enumerator_answers_waiting_readers_when_a_listing_finds_files(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    ctx = _Context()
    # Taken at the first listing that finds them: settling is in test_watched_folder_faults.py.
    e = FileEnumerator((str(folder),), 5000, FileEnumeratorState(), settle_ms=0)
    e.start(ctx)
    assert [period for _, _, period in ctx.calls] == [5.0]  # the listing runs off the loop, every 5 s
    e.handle_split_request(1, ctx)
    e.handle_split_request(0, ctx)
    ctx.run_calls()
    assert ctx.events == []  # nothing yet: both wait, and a monitored source never says "no more"
    for name in ["b", "a", ".hidden", "_c"]:
        (folder / name).write_text("x\n")
    ctx.run_calls()
    a, b = (f.split for f in list_files([str(folder)]))
    assert ctx.events == [(0, AddSplits([a])), (1, AddSplits([b]))]
    ctx.run_calls()  # the same files again: seen
    e.handle_split_request(0, ctx)
    assert ctx.events[2:] == []
    (folder / "c").write_text("x\n")
    ctx.run_calls()
    c = list_files([str(folder)])[2].split
    assert ctx.events[2:] == [(0, AddSplits([c]))]
    state = e.snapshot_state()
    assert state == FileEnumeratorState(
        frozenset({a.path, b.path, c.path}), (), True, frozenset({a.file_id, b.file_id, c.file_id})
    )
    e.add_splits_back([c], 0)  # subtask 0 restarts alone from a checkpoint before c was handed out
    assert e.snapshot_state().pending == (c,)


def test_a_bounded_enumerator_lists_once_and_then_says_no_more(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a").write_text("x\n")
    ctx = _Context()
    e = FileEnumerator((str(folder),), None, FileEnumeratorState())
    e.start(ctx)
    assert [period for _, _, period in ctx.calls] == [None]
    e.handle_split_request(0, ctx)
    e.handle_split_request(1, ctx)
    ctx.run_calls()
    assert ctx.events == [(0, AddSplits([list_files([str(folder)])[0].split])), (1, NoMoreSplits())]
    restored, ctx = FileEnumerator((str(folder),), None, e.snapshot_state()), _Context()
    restored.start(ctx)
    assert ctx.calls == []  # listed before the checkpoint: a restore does not list again


def test_a_reader_asks_for_its_next_file_while_it_reads_its_last(tmp_path):
    """The request's round trip to the enumerator is hidden behind the reading: a
    reader asks for a file as it starts its last, so the next one is there when
    that one ends; every line still comes once, in file order, and the file that
    waits does not hold back the watermark (the lines' time: file * 100 + line)."""
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        (folder / f"f{i}.txt").write_text("".join(f"{i}-{j}\n" for j in range(10)))
    enumerator, ctx = FileEnumerator((str(folder),), None, FileEnumeratorState()), _Context()
    enumerator.start(ctx)
    ctx.run_calls()
    source = _source(StreamFormat.text_line_format(), str(folder))
    line_time = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda line: int(line[0]) * 100 + int(line[2:])
    )
    op = SourceOperator("files", "files-uid", source, line_time, watermark_interval_ms=0)
    out = _Lines()
    requests: list[int] = []  # how many lines had been emitted at each request

    def send(uid: str, event: Any) -> None:
        requests.append(len(out.lines))
        enumerator.handle_split_request(0, ctx)

    op.setup(OperatorContext("job", "files", 0, 1, 128, "attempt", send_operator_event=send), out)
    op.initialize_state(RestoredState())
    op.open()
    snapshots = []
    while True:
        while ctx.events:
            op.handle_operator_event(ctx.events.pop(0)[1])
        if op.poll(4).end:
            break
        op.snapshot_state(len(snapshots) + 1)
        snapshots.append([os.path.basename(split.path) for split, _ in op.operator_state.lists[op.SPLITS]])
    assert out.lines == [f"{i}-{j}" for i in range(3) for j in range(10)]
    # A checkpoint holds the file that waits ahead: a restore reads it.
    assert snapshots == [["f0.txt"], ["f0.txt", "f1.txt"], ["f1.txt"], ["f1.txt"], ["f1.txt", "f2.txt"]] + [
        ["f2.txt"]
    ] * 3 + [[]]
    # Each file's watermarks as it is read (monotonous: the last line's time, minus 1), with
    # the next file waiting ahead; were that file the reader's, it would hold them back.
    assert out.watermarks == [(2, 4), (6, 8), (102, 14), (106, 18), (202, 24), (206, 28)]
    # At the start, then with each file's first batch (the last answer: no more).
    # Asking only when out of files: [0, 10, 20, 30].
    assert requests == [0, 0, 10, 20]


class _Lines(Output):
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.watermarks: list[tuple[int, int]] = []  # (watermark, lines emitted before it)

    def collect(self, records: list[Any], timestamps: list[int] | None = None) -> None:
        self.lines.extend(records)

    def emit_watermark(self, watermark: Watermark) -> None:
        self.watermarks.append((watermark.timestamp, len(self.lines)))


# ------------------------------------------------------------------ exactly-once while tasks are killed
FILES_AFTER_KILLS = 4
LINES_PER_FILE = 60


def _writer(folder: str, client: Any, kills_done: threading.Event, written: list[tuple[str, int]]) -> None:
    """Files of "key,value" lines, one per completed checkpoint of ``client``'s
    job, until the kills are done and a few more."""
    i = after = 0
    while after < FILES_AFTER_KILLS:
        lines = [(f"k{(i * 7 + j) % 13}", i * LINES_PER_FILE + j) for j in range(LINES_PER_FILE)]
        _publish(os.path.join(folder, f"{i:04}.csv"), "".join(f"{k},{v}\n" for k, v in lines).encode())
        written += lines
        i += 1
        after += kills_done.is_set()
        completed = _completed(client)
        client.wait_until(lambda c, completed=completed: _completed(c) > completed, 300)


def _completed(client: Any) -> int:
    return sum(c["status"] == "COMPLETED" for c in client.checkpoints())


class _Forgetful(FileSource):
    """The protection switched off: a restored enumerator forgets the files it had seen."""

    def create_enumerator(self, parallelism: int, restored: Any | None) -> Any:
        return super().create_enumerator(
            parallelism, restored and replace(restored, seen=frozenset(), seen_files=frozenset())
        )


def _sum_job(env: StreamExecutionEnvironment, folder: str, out: str, source_type: type[FileSource]) -> None:
    schema = CsvSchema.builder().add_string_column("key").add_number_column("value").build()
    source = source_type(CsvReaderFormat.for_schema(schema), [folder], Duration.of_millis(20))
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "csv")
        .map(lambda r: (r["key"], r["value"]))
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .name("sum")
        .sink_to(FileSink(out))
    )


def run_with_kills(
    env: StreamExecutionEnvironment,
    tmp_path: Any,
    source_type: type[FileSource] = FileSource,
    executor: str | None = "local",
    timeout_s: float = 30,
) -> Any:
    """Files keep arriving in a watched folder while both source subtasks and a
    sum subtask are killed, each after more checkpoints completed; the verdict on
    the committed running sums."""
    folder, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(folder)
    kills_done, written = threading.Event(), []
    _sum_job(env, folder, out, source_type)
    client = env.execute_async("watched-sums", executor=executor)
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(_writer, folder, client, kills_done, written)
        try:
            client.wait_until(lambda c: len(read_committed(out)) > 0, timeout_s)
            kill_each_after_checkpoints(client, "source-csv", (0, 1))
            kill_each_after_checkpoints(client, "sum", (1,))
        finally:
            kills_done.set()
    writer.result()
    client.wait_until(lambda c: len(read_committed(out)) >= len(written), timeout_s)
    client.cancel()
    assert client.restarts() == 3
    return check_running_sums(map(tuple, read_committed(out)), written)


def test_files_arriving_while_tasks_are_killed_are_read_exactly_once(checkpoint_dir, tmp_path):
    v = run_with_kills(_env(checkpoint_dir), tmp_path)
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), v


def test_without_the_memory_of_seen_files_a_restore_reads_files_again(checkpoint_dir, tmp_path):
    """The check above can fail: with the enumerator's memory switched off, the
    files read before the restored checkpoint are found and read again."""
    v = run_with_kills(_env(checkpoint_dir), tmp_path, _Forgetful)
    assert v.duplicated > 0, v


def test_a_source_subtask_restarting_alone_gets_back_the_files_handed_to_it_after_the_checkpoint(
    checkpoint_dir, tmp_path
):
    """Region failover: each source subtask's pipeline is its own region, so a
    killed one restarts alone while the other reads on; what the enumerator handed
    it after the restored checkpoint is handed out again, once."""
    folder, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(folder)
    kills_done, written = threading.Event(), []
    env = _env(checkpoint_dir)
    source = _source(StreamFormat.text_line_format(), folder, monitor_ms=Duration.of_millis(20))
    env.from_source(source, WatermarkStrategy.no_watermarks(), "lines").sink_to(FileSink(out))
    client = env.execute_async("region-files", executor="local")
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(_writer, folder, client, kills_done, written)
        try:
            client.wait_until(lambda c: len(read_committed(out)) > 0)
            kill_each_after_checkpoints(client, "source-lines", (0, 1))
        finally:
            kills_done.set()
    writer.result()
    expected = sorted(f"{k},{v}" for k, v in written)
    client.wait_until(lambda c: len(read_committed(out)) >= len(expected))
    client.cancel()
    assert client.restarts() == 2
    assert sorted(read_committed(out)) == expected


def test_a_bounded_source_subtask_restarting_alone_reads_each_file_once(checkpoint_dir, tmp_path):
    """Region failover with files asked for ahead: whatever a killed source subtask
    held (the file it read, the one waiting for it) is read once, from the
    restored checkpoint or handed out again. With the waiting file left out of the
    subtask's checkpoint, lines were lost in 3 runs of 4."""
    folder, out = tmp_path / "in", str(tmp_path / "out")
    folder.mkdir()
    expected = [f"{i}-{j}" for i in range(40) for j in range(30)]
    for i in range(40):
        (folder / f"f{i:02}.txt").write_text("".join(f"{i}-{j}\n" for j in range(30)))
    env = _env(checkpoint_dir)
    source = _source(StreamFormat.text_line_format(), str(folder))
    env.from_source(source, WatermarkStrategy.no_watermarks(), "lines").map(_slowly).sink_to(FileSink(out))
    client = env.execute_async("bounded-region-files", executor="local")
    kill_each_after_checkpoints(client, "source-lines", (0, 1), checkpoints=2)
    client.wait()
    assert client.restarts() == 2
    assert sorted(read_committed(out)) == sorted(expected)


def _slowly(line: str) -> str:
    time.sleep(0.004)  # 1,200 lines: about 2.4 s a subtask, long enough for two kills
    return line


# ------------------------------------------------------------------ savepoints and rescaling
PAUSED = [threading.Event(), threading.Event()]  # by subtask; module level: pickled by reference


class _StopsMidway(FileSource):
    """Each reader passes on 40 lines (of a file of 150), then waits."""

    def create_reader(self, subtask: int, parallelism: int) -> Any:
        return PausingReader(super().create_reader(subtask, parallelism), 40, PAUSED[subtask])


def test_stop_with_savepoint_and_a_rescaled_resume_read_each_line_once(checkpoint_dir, tmp_path):
    folder, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(folder)
    expected = []

    def publish(first: int, count: int) -> None:
        for i in range(first, first + count):
            lines = [f"{i}-{j}" for j in range(150)]
            expected.extend(lines)
            _publish(os.path.join(folder, f"{i:03}.txt"), "\n".join(lines).encode())

    def job(parallelism: int, source_type: type[FileSource], savepoint: str | None = None) -> Any:
        env = _env(checkpoint_dir, parallelism)
        env.set_batch_size(16)
        if savepoint:
            env.restore_from_savepoint(savepoint)
        source = source_type(StreamFormat.text_line_format(), [folder], Duration.of_millis(20))
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines").uid("lines").sink_to(FileSink(out))
        return env.execute_async("rescaled-files", executor="local")

    publish(0, 8)
    client = job(2, _StopsMidway)
    assert all(paused.wait(30) for paused in PAUSED)  # both readers mid-file
    savepoint = client.stop(str(tmp_path / "sp"))
    (handle,) = read_metadata(savepoint)["coordinators"].values()
    state = read_state(handle_from_json(handle))
    assert state.pending and len(state.seen) == 8  # files left for later, all of them remembered
    read_before = len(read_committed(out))
    assert read_before == 2 * 40 < len(expected)  # what the two readers passed on, committed by the stop
    publish(8, 4)  # while the job is stopped
    client = job(3, FileSource, savepoint)
    client.wait_until(lambda c: len(read_committed(out)) >= len(expected))
    publish(12, 2)  # while the resumed job runs
    client.wait_until(lambda c: len(read_committed(out)) >= len(expected))
    client.cancel()
    assert sorted(read_committed(out)) == sorted(expected)


# ------------------------------------------------------------------ a large Parquet file in parts
def _one_large_parquet_file(folder: str, groups: int = 12, rows_per_group: int = 100) -> tuple[str, list[dict]]:
    rows = [{"id": i, "score": i / 4, "dropped": "x" * 40} for i in range(groups * rows_per_group)]
    path = os.path.join(folder, "large.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=rows_per_group)
    return path, [{"id": r["id"], "score": r["score"]} for r in rows]


@pytest.mark.parametrize("split_bytes", [97, 700, 1500, 4000, 10**9])
def test_the_parts_of_a_parquet_file_read_each_row_once_also_resumed_mid_part(tmp_path, split_bytes):
    """A file cut into parts of ``split_bytes`` (some hold no row group's middle,
    some several): the parts' rows, each part read with its snapshot passed to a
    new reader every few records as a restore does, are the file's, once each."""
    path, expected = _one_large_parquet_file(str(tmp_path))
    parts = _parts_of(path, split_bytes)
    size = os.path.getsize(path)
    assert len(parts) == max(1, -(-size // split_bytes)) if split_bytes < size else parts[0].part is None
    fmt = ParquetColumnarRowInputFormat(PARQUET_TYPE, batch_size=30, split_bytes=split_bytes)
    got = [row for part in parts for row in _read_resuming(fmt, part)]
    assert got == expected  # parts in file order, rows in file order: nothing twice, nothing lost


def test_a_row_group_whose_middle_lies_past_the_files_end_is_read_by_the_last_part(tmp_path, monkeypatch):
    """A writer's odd offsets can put a row group's middle past the file's last
    byte, where no part lies: the last part reads it, so no row is lost."""
    path, expected = _one_large_parquet_file(str(tmp_path))
    monkeypatch.setattr(formats, "_middle", lambda group: 10**12)
    parts = _parts_of(path, 700)
    fmt = ParquetColumnarRowInputFormat(PARQUET_TYPE, batch_size=30, split_bytes=700)
    read = [_read_resuming(fmt, part) for part in parts]
    assert read[-1] == expected and not any(read[:-1])


def _parts_of(path: str, split_bytes: int) -> list[Any]:
    """The splits a bounded enumerator hands out for ``path``, in order."""
    enumerator, ctx = FileEnumerator((path,), None, FileEnumeratorState(), split_bytes=split_bytes), _Context()
    enumerator.start(ctx)
    ctx.run_calls()
    return list(enumerator.snapshot_state().pending)


def _read_resuming(fmt: Any, part: Any) -> list[Any]:
    """A part's rows, its snapshot passed to a new reader after every poll of 7, as a restore does."""
    got, resumed = [], [part]
    while True:
        reader = FileReader(fmt)
        reader.add_splits(resumed)
        poll = reader.poll(7)
        if poll.end:
            return got
        assert poll.split_id == part.split_id
        got += poll.records
        resumed = reader.snapshot_splits()
        reader.close()


def test_readers_share_one_large_parquet_file_by_its_parts(checkpoint_dir, tmp_path):
    """One file, three readers: each reads a part of it (a file used to go to one
    reader whole), and the job's output is every row once."""
    path, expected = _one_large_parquet_file(str(tmp_path), groups=12)
    fmt = ParquetColumnarRowInputFormat(PARQUET_TYPE, split_bytes=os.path.getsize(path) // 6)
    out = str(tmp_path / "out")
    env = _env(checkpoint_dir, parallelism=3)
    env.from_source(_source(fmt, path), WatermarkStrategy.no_watermarks(), "files").map(_slowly_row).sink_to(
        FileSink(out)
    )
    result = env.execute("one-large-file", executor="local")
    assert sorted(map(_key, read_committed(out))) == sorted(map(_key, expected))
    read = [m["records_in"] for m in result.metrics if m["task"].startswith("source-files")]
    assert len(read) == 3 and all(n > 0 for n in read), read


def test_parts_of_a_large_parquet_file_are_read_once_when_their_readers_are_killed(checkpoint_dir, tmp_path):
    """Both readers of one file's parts killed mid-job (region failovers): each
    row comes out once, whichever part and row group the restore resumes in."""
    path, expected = _one_large_parquet_file(str(tmp_path), groups=24, rows_per_group=50)
    fmt = ParquetColumnarRowInputFormat(PARQUET_TYPE, batch_size=10, split_bytes=os.path.getsize(path) // 8)
    out = str(tmp_path / "out")
    env = _env(checkpoint_dir)
    env.from_source(_source(fmt, path), WatermarkStrategy.no_watermarks(), "rows").map(_slowly).sink_to(FileSink(out))
    client = env.execute_async("killed-parts", executor="local")
    kill_each_after_checkpoints(client, "source-rows", (0, 1), checkpoints=2)
    client.wait()
    assert client.restarts() == 2
    assert sorted(map(_key, read_committed(out))) == sorted(map(_key, expected))


def _slowly_row(row: dict) -> dict:
    time.sleep(0.0005)  # a reader holds its part long enough for the others to ask for theirs
    return row


def test_split_bytes_that_are_not_a_positive_int_are_refused_naming_the_setting():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidConfigurationError, match="ParquetColumnarRowInputFormat split_bytes"):
            ParquetColumnarRowInputFormat(PARQUET_TYPE, split_bytes=bad)


# ------------------------------------------------------------------ bad input
def _read_all(fmt: Any, path: str) -> list[Any]:
    reader = FileReader(fmt)
    reader.add_splits([f.split for f in list_files([path])])
    out: list[Any] = []
    while not (poll := reader.poll(100)).end:
        out += poll.records
    return out


@pytest.mark.parametrize(
    "fmt, data, message",
    [
        (
            StreamFormat.json_lines_format(),
            b'{"a": 1}\n{"a": 2}\n{"a": oops}\n',
            r"file .*/bad, line 3: not JSON \(Expecting value: .*\): '\{\"a\": oops\}'",
        ),
        (
            StreamFormat.text_line_format(),
            b"fine\n\xff\xfe\n",
            r"file .*/bad, line 2: not UTF-8 \(invalid start byte at byte 0 of the line\)",
        ),
        (
            CsvReaderFormat.for_schema(CSV_SCHEMA),
            b"id,name,price,ok,tags\n1,a,2.5,true,x\n2,b,cheap,true,x\n",
            r"file .*/bad, line 3: column 'price' is not float: 'cheap'",
        ),
        (
            CsvReaderFormat.for_schema(CSV_SCHEMA),
            b"id,name,price,ok,tags\n1,a,2.5\n",
            r"file .*/bad, line 2: 3 fields where the schema has 5 \(id, name, price, ok, tags\): \['1', 'a', '2.5'\]",
        ),
        (
            CsvReaderFormat.for_schema(CSV_SCHEMA),
            b"id,title,price,ok,tags\n",
            r"file .*/bad, line 1: the header is not the schema's columns \['id', 'name', 'price', 'ok', 'tags'\]",
        ),
        (ParquetColumnarRowInputFormat(), b"PAR1 but not parquet", r"file .*/bad, its footer: not Parquet"),
    ],
)
def test_a_malformed_line_names_the_file_and_the_line(tmp_path, fmt, data, message):
    path = str(tmp_path / "bad")
    _publish(path, data)
    with pytest.raises(MalformedInputError, match=message):
        _read_all(fmt, path)


def test_a_parquet_file_without_a_column_of_the_row_type_names_it(tmp_path):
    path = str(tmp_path / "p.parquet")
    pq.write_table(pa.table({"id": [1, 2]}), path)
    with pytest.raises(MalformedInputError, match=r"file .*/p.parquet, row group 0: .*score"):
        _read_all(ParquetColumnarRowInputFormat(PARQUET_TYPE), path)


def test_a_job_reading_a_bad_line_fails_naming_operator_file_and_line_after_its_restarts(checkpoint_dir, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "orders.jsonl").write_text('{"id": 1}\n{"id": 2\n')
    env = _env(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(1, 0))
    source = _source(StreamFormat.json_lines_format(), str(folder))
    env.from_source(source, WatermarkStrategy.no_watermarks(), "orders").sink_to(FileSink(str(tmp_path / "out")))
    with pytest.raises(JobExecutionError) as info:
        env.execute("bad-orders", executor="local")
    text = str(info.value)
    assert "after 1 restart(s)" in text
    assert (
        "source reader of operator 'Source: orders' raised MalformedInputError: "
        f"file {folder}/orders.jsonl, line 2: not JSON"
    ) in text


def test_settings_the_source_cannot_use_are_refused_naming_them(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="FileSource discovery_interval=0"):
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).monitor_continuously(0)
    with pytest.raises(InvalidConfigurationError, match="charset_name='UTF-16'.*split at the byte"):
        StreamFormat.text_line_format("UTF-16")
    with pytest.raises(TypeError, match="for_bulk_file_format\\(\\) takes a BulkFormat"):
        FileSource.for_bulk_file_format(StreamFormat.text_line_format(), str(tmp_path))
    with pytest.raises(FileNotFoundError, match="FileSource path .*/missing does not exist"):
        list_files([str(tmp_path / "missing")])
