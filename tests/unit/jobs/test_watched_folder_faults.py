"""A watched folder when producers and users misbehave: a file still being written
in place is taken only once it has settled, names of files in progress are
skipped, a renamed file keeps its identity (also across a restore and from an
old checkpoint), and a file deleted before its turn is skipped with a warning.
Time is moved by hand (an injected clock); jobs wait on records, never on sleeps."""

from __future__ import annotations

import logging
import os
import pickle
from typing import Any

import pytest

from tests.unit.jobs.test_file_source import _Context, _env, _publish
from weir import Duration, InvalidConfigurationError, WatermarkStrategy
from weir.connectors import file_source
from weir.connectors.file_source import FileEnumerator, FileEnumeratorState, FileReader, FileSplit, list_files
from weir.connectors.files import FileSink, FileSource, StreamFormat, read_committed
from weir.runtime.clock import ManualClock
from weir.runtime.sources import AddSplits


def _watching(
    folder: Any, settle_ms: int, clock: ManualClock, state: FileEnumeratorState | None = None
) -> tuple[FileEnumerator, _Context]:
    """A monitored enumerator on ``folder``, started, with subtask 0 waiting for a file."""
    ctx = _Context()
    e = FileEnumerator((str(folder),), 100, state or FileEnumeratorState(), settle_ms=settle_ms, clock=clock.now)
    e.start(ctx)
    e.handle_split_request(0, ctx)
    return e, ctx


def _list_at(ctx: _Context, clock: ManualClock, now: float) -> list[str]:
    """One listing at ``now``: the paths it handed out."""
    clock.set(now)
    before = len(ctx.events)
    ctx.run_calls()
    return [s.path for _, event in ctx.events[before:] if isinstance(event, AddSplits) for s in event.splits]


def _read(splits: list[FileSplit]) -> list[Any]:
    reader = FileReader(StreamFormat.text_line_format())
    reader.add_splits(splits)
    out: list[Any] = []
    while not (poll := reader.poll(100)).end:
        out += poll.records
    return out


# ------------------------------------------------------------------ 6: a file written in place
def test_a_file_written_in_place_is_taken_only_once_unchanged_for_the_settle_time(tmp_path):
    clock = ManualClock()
    e, ctx = _watching(tmp_path, 1000, clock)
    path = tmp_path / "orders.txt"
    path.write_bytes(b"first\nseco")
    assert _list_at(ctx, clock, 0.0) == []  # the reader would see half a line
    with open(path, "ab") as f:
        f.write(b"nd\nthi")
    assert _list_at(ctx, clock, 0.5) == []  # grew: its settle time starts again
    with open(path, "ab") as f:
        f.write(b"rd")  # done: a complete file's last line needs no \n
    assert _list_at(ctx, clock, 1.0) == []
    assert _list_at(ctx, clock, 1.9) == []  # unchanged for 0.9 s only
    assert _list_at(ctx, clock, 2.0) == [str(path)]
    ((_, event),) = ctx.events
    assert _read(event.splits) == ["first", "second", "third"]


def test_a_slow_listing_does_not_count_towards_the_settle_time(tmp_path, monkeypatch):
    """The settle time runs from the end of the listing that saw a version to the
    start of the one that saw it again: time spent listing proves nothing."""
    clock = ManualClock()
    listing = file_source.list_files

    def slow(paths: Any) -> Any:
        found = listing(paths)
        clock.advance(0.9)
        return found

    monkeypatch.setattr(file_source, "list_files", slow)
    e, ctx = _watching(tmp_path, 1000, clock)
    (tmp_path / "a").write_text("x\n")
    assert _list_at(ctx, clock, 0.0) == []  # seen at 0.0..0.9
    assert _list_at(ctx, clock, 1.5) == []  # again at 1.5..2.4: from 0.9 to 1.5 is 0.6 s
    assert _list_at(ctx, clock, 2.5) == [str(tmp_path / "a")]


def test_without_a_settle_time_a_file_is_taken_at_the_first_listing(tmp_path):
    clock = ManualClock()
    e, ctx = _watching(tmp_path, 0, clock)
    (tmp_path / "a").write_text("x\n")
    assert _list_at(ctx, clock, 0.0) == [str(tmp_path / "a")]


def test_names_of_files_in_progress_are_skipped(tmp_path):
    for name in [
        ".a",
        "_b",
        "c.tmp",
        "d.TEMP",
        "e.part",
        "f.partial",
        "g.csv._COPYING_",
        "h.crdownload",
        "i.filepart",
        "j.inprogress",
        "k~",
        "data.csv",
        "report.partition.csv",
    ]:
        (tmp_path / name).write_text("x\n")
    names = [os.path.basename(f.split.path) for f in list_files([str(tmp_path)])]
    assert names == ["data.csv", "report.partition.csv"]
    # a file given by name is read whatever its name
    assert [f.split.path for f in list_files([str(tmp_path / "c.tmp")])] == [str(tmp_path / "c.tmp")]


def test_a_settle_time_the_source_cannot_use_is_refused_naming_it(tmp_path):
    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
    refused = r"invalid setting FileSource settle_time=-1: must be an int of milliseconds, 0 or more"
    with pytest.raises(InvalidConfigurationError, match=refused):
        builder.monitor_continuously(Duration.of_seconds(1), settle_time=-1)
    source = builder.monitor_continuously(Duration.of_seconds(1), settle_time=Duration.of_millis(300)).build()
    assert source.settle_ms == 300
    assert builder.monitor_continuously(Duration.of_seconds(1)).build().settle_ms == 1000  # the default


# ------------------------------------------------------------------ 7: a file renamed
def test_a_file_renamed_after_it_was_handed_out_is_not_read_again_also_after_a_restore(tmp_path):
    clock = ManualClock()
    e, ctx = _watching(tmp_path, 0, clock)
    (tmp_path / "a").write_text("x\n")
    assert _list_at(ctx, clock, 0.0) == [str(tmp_path / "a")]
    os.rename(tmp_path / "a", tmp_path / "b")
    e.handle_split_request(0, ctx)
    assert _list_at(ctx, clock, 1.0) == []  # b is a
    state = e.snapshot_state()
    assert pickle.loads(pickle.dumps(state)) == state
    assert all(type(i) is tuple and all(type(n) is int for n in i) for i in state.seen_files)  # plain data
    restored, ctx = _watching(tmp_path, 0, clock, state)
    os.rename(tmp_path / "b", tmp_path / "c")
    assert _list_at(ctx, clock, 2.0) == []  # c is a, too
    (tmp_path / "d").write_text("x\n")  # same name length, same bytes: another file
    assert _list_at(ctx, clock, 3.0) == [str(tmp_path / "d")]


def test_a_file_renamed_before_its_turn_is_handed_out_once_under_its_new_name(tmp_path):
    clock = ManualClock()
    e, ctx = _watching(tmp_path, 0, clock)
    (tmp_path / "a").write_text("a1\n")
    (tmp_path / "b").write_text("b1\n")
    assert _list_at(ctx, clock, 0.0) == [str(tmp_path / "a")]  # b waits
    os.rename(tmp_path / "b", tmp_path / "c")
    assert _list_at(ctx, clock, 1.0) == []
    e.handle_split_request(0, ctx)
    ((_, event),) = ctx.events[1:]
    (split,) = event.splits
    assert split.path == str(tmp_path / "c") and _read([split]) == ["b1"]
    e.handle_split_request(0, ctx)
    assert _list_at(ctx, clock, 2.0) == []


def test_a_checkpoint_of_the_memory_of_paths_only_still_restores(tmp_path):
    """A checkpoint written before files had an identity: its state pickles the
    fields it had then, and a restore reads neither those files nor the pending
    one twice."""
    for name in ["a", "b", "c"]:
        (tmp_path / name).write_text(f"{name}1\n")
    old_split = FileSplit.__new__(FileSplit)
    old_split.__dict__.update(root=str(tmp_path), path=str(tmp_path / "b"), offset=0, records=0)
    old = FileEnumeratorState.__new__(FileEnumeratorState)
    old.__dict__.update(seen=frozenset({str(tmp_path / "a"), str(tmp_path / "b")}), pending=(old_split,), listed=True)
    state = pickle.loads(pickle.dumps(old))
    clock = ManualClock()
    e, ctx = _watching(tmp_path, 0, clock, state)
    assert [s.path for s in ctx.events[0][1].splits] == [str(tmp_path / "b")]  # the pending one, at once
    e.handle_split_request(0, ctx)
    assert _list_at(ctx, clock, 0.0) == [str(tmp_path / "c")]
    assert _read([ctx.events[0][1].splits[0]]) == ["b1"]


def test_a_job_does_not_read_a_renamed_file_again(checkpoint_dir, tmp_path):
    """One reader takes files in the order of their names, so once z (published
    after the rename) is committed, a renamed b would have been read before it."""
    folder, out = tmp_path / "in", str(tmp_path / "out")
    folder.mkdir()
    _publish(str(folder / "a.txt"), b"a1\na2\n")
    env = _env(checkpoint_dir, parallelism=1)
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(folder))
        .monitor_continuously(Duration.of_millis(20), settle_time=Duration.of_millis(50))
        .build()
    )
    env.from_source(source, WatermarkStrategy.no_watermarks(), "watched").sink_to(FileSink(out))
    client = env.execute_async("renamed", executor="local")
    client.wait_until(lambda c: len(read_committed(out)) >= 2)
    os.rename(folder / "a.txt", folder / "b.txt")
    _publish(str(folder / "z.txt"), b"z1\n")
    client.wait_until(lambda c: "z1" in read_committed(out))
    client.cancel()
    assert sorted(read_committed(out)) == ["a1", "a2", "z1"]


# ------------------------------------------------------------------ 8: a file deleted before its turn
def test_a_file_deleted_before_its_turn_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    for name in ["a", "b", "c"]:
        (tmp_path / name).write_text(f"{name}1\n{name}2\n")
    a, b, c = (f.split for f in list_files([str(tmp_path)]))
    restored_mid_file = FileSplit(b.root, b.path, offset=3, records=1)  # as a restore hands it back
    os.remove(b.path)
    with caplog.at_level(logging.WARNING, logger="weir.file_source"):
        assert _read([a, restored_mid_file, c]) == ["a1", "a2", "c1", "c2"]
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == (
        f"FileSource: file {b.path} is gone (deleted or moved out) "
        "before it was read to its end: skipping the rest of it"
    )


class _PermissionDenied(StreamFormat):
    """Opening any file fails as a file without read permission does."""

    def records(self, lines: Any) -> Any:
        raise AssertionError("never opened")

    def open(self, fs: Any, split: FileSplit) -> Any:
        raise PermissionError(13, "Permission denied", split.path)


def test_a_file_that_cannot_be_opened_for_another_reason_still_fails_naming_it(tmp_path):
    (tmp_path / "a").write_text("x\n")
    reader = FileReader(_PermissionDenied())
    reader.add_splits([f.split for f in list_files([str(tmp_path)])])
    with pytest.raises(PermissionError, match=f"Permission denied: '{tmp_path}/a'"):
        reader.poll(10)


class _DeletesTheNext(StreamFormat):
    """Text lines; opening ``a`` deletes ``b``: a file gone after the listing, before its turn."""

    def records(self, lines: Any) -> Any:
        return StreamFormat.text_line_format().records(lines)

    def open(self, fs: Any, split: FileSplit) -> Any:
        b = split.path[:-1] + "b"
        if split.path.endswith("/a") and os.path.exists(b):  # once: a restart reopens a
            os.remove(b)
        return super().open(fs, split)


def test_a_job_whose_file_is_deleted_before_its_turn_finishes_with_the_other_files(checkpoint_dir, tmp_path, caplog):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ["a", "b", "c"]:
        _publish(str(folder / name), f"{name}1\n{name}2\n".encode())
    out = str(tmp_path / "out")
    env = _env(checkpoint_dir, parallelism=1)
    source = FileSource.for_record_stream_format(_DeletesTheNext(), str(folder)).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "files").sink_to(FileSink(out))
    with caplog.at_level(logging.WARNING, logger="weir.file_source"):
        result = env.execute("deleted", executor="local")
    assert (result.status.name, result.restarts) == ("FINISHED", 0)  # not a failure that a restart hides
    assert sorted(read_committed(out)) == ["a1", "a2", "c1", "c2"]
    assert f"FileSource: file {folder}/b is gone (deleted or moved out) before it was read" in caplog.text
