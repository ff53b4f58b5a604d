"""The event valve of operator coordinators, step by step, and sources built on it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.pausing import PausingReader
from weir import RestartStrategy, StreamExecutionEnvironment
from weir.connectors.files import FileSink, read_committed
from weir.runtime.coordination import CoordinatorContext, CoordinatorHolder, OperatorCoordinator
from weir.runtime.errors import JobExecutionError
from weir.runtime.sinks import DiscardingSink
from weir.runtime.sources import (
    AddSplits,
    IndexSplit,
    NoMoreSplits,
    SequenceSource,
    SourceReader,
    StaticSplitEnumerator,
)
from weir.runtime.storage import handle_from_json, read_metadata, read_state


class Echo(OperatorCoordinator):
    def start(self, context: CoordinatorContext, restored: Any | None) -> None:
        self.context, self.restored = context, restored

    def handle_event(self, subtask: int, event: Any) -> None:
        self.context.send_event(subtask, event)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        return f"state@{checkpoint_id}"


def _holder(valve: bool = True) -> tuple[CoordinatorHolder, list[tuple[int, int, Any]]]:
    sent: list[tuple[int, int, Any]] = []
    h = CoordinatorHolder(
        "uid", "op", 2, Echo(), lambda subtask, uid, event_id, event: sent.append((subtask, event_id, event)), valve
    )
    h.start(None)
    return h, sent


def test_one_event_at_a_time_per_subtask_in_the_order_sent():
    h, sent = _holder()
    h.handle_event(0, "a")
    h.handle_event(0, "b")
    h.handle_event(1, "c")
    assert sent == [(0, 0, "a"), (1, 2, "c")]  # "b" waits for "a"'s acknowledgement
    h.on_event_acknowledged(0, 0)
    assert sent[-1] == (0, 1, "b")


def test_a_checkpoint_waits_for_earlier_events_and_later_events_wait_for_the_subtask_snapshot():
    h, sent = _holder()
    h.handle_event(0, "before")
    assert h.snapshot(5, {0, 1}) == "state@5"
    h.handle_event(0, "after")
    h.handle_event(1, "after-1")
    assert not h.settled(5)  # "before" is not handled yet: no task may be triggered
    h.on_event_acknowledged(0, 0)
    assert h.settled(5)
    assert [e for _, _, e in sent] == ["before"]  # both "after"s are held by the valve
    h.on_subtask_checkpointed(1, 5)
    assert [e for _, _, e in sent] == ["before", "after-1"]
    h.on_checkpoint_ended(5, completed=False)  # aborted: the valve opens for everyone
    assert [e for _, _, e in sent] == ["before", "after-1", "after"]


def test_with_two_checkpoints_in_flight_events_between_them_go_out_once_the_older_is_snapshotted():
    """Issue #13 item 5: an event sent between the snapshots of checkpoints 5 and 6
    must reach the subtask before 6 is triggered there; once the subtask has
    snapshotted 5 it goes out (it used to wait for 6, which waited for it)."""
    h, sent = _holder()
    h.snapshot(5, {0, 1})
    h.handle_event(0, "between")
    h.snapshot(6, {0, 1})
    h.handle_event(0, "after-6")
    assert h.settled(5) and not h.settled(6) and sent == []
    h.on_subtask_checkpointed(0, 5)
    assert [e for _, _, e in sent] == ["between"]  # not "after-6": 6 is not snapshotted yet
    h.on_event_acknowledged(0, 0)
    assert h.settled(6)
    h.on_subtask_checkpointed(0, 6)
    assert [e for _, _, e in sent] == ["between", "after-6"]


def test_without_the_valve_nothing_waits_for_checkpoints():
    h, sent = _holder(valve=False)
    h.handle_event(0, "before")
    h.snapshot(5, {0, 1})
    h.handle_event(1, "after")
    assert h.settled(5) and [e for _, _, e in sent] == ["before", "after"]


def test_a_gone_subtask_neither_gets_events_nor_holds_back_checkpoints():
    h, sent = _holder()
    h.handle_event(0, "x")
    h.snapshot(1, {0, 1})
    h.on_subtask_gone(0)
    h.handle_event(0, "y")
    assert h.settled(1) and [e for _, _, e in sent] == ["x"]


class _Context:
    parallelism = 2

    def __init__(self) -> None:
        self.events: list[tuple[int, Any]] = []

    def assign_splits(self, subtask: int, splits: list[Any]) -> None:
        self.events.append((subtask, AddSplits(splits)))

    def signal_no_more_splits(self, subtask: int) -> None:
        self.events.append((subtask, NoMoreSplits()))


def test_static_enumerator_gives_each_subtask_its_own_splits_and_dynamic_shares_them_out():
    splits = list(enumerate("abcd"))
    ctx = _Context()
    e = StaticSplitEnumerator(splits)
    e.handle_split_request(1, ctx)
    e.handle_split_request(1, ctx)
    assert ctx.events == [(1, AddSplits(["b", "d"])), (1, NoMoreSplits())]
    assert e.snapshot_state() == [(0, "a"), (2, "c")]
    ctx = _Context()
    e = StaticSplitEnumerator(splits, dynamic=True)
    for _ in range(4):
        e.handle_split_request(1, ctx)
    assert ctx.events == [(1, AddSplits(["b"])), (1, AddSplits(["d"])), (1, AddSplits(["a"])), (1, AddSplits(["c"]))]


FIRST_SPLIT_READ = [threading.Event(), threading.Event()]  # by subtask; module level: pickled by reference


class EightSplits(SequenceSource):
    dynamic_splits = True

    def create_splits(self, parallelism: int) -> list[Any]:
        return [IndexSplit(i, i * 25, (i + 1) * 25) for i in range(8)]


class OneSplitEach(EightSplits):
    """Each subtask reads one split (25 numbers), then waits."""

    def create_reader(self, subtask: int, parallelism: int) -> SourceReader:
        return PausingReader(super().create_reader(subtask, parallelism), 25, FIRST_SPLIT_READ[subtask])


class _BrokenEnumerator(SequenceSource):
    def create_enumerator(self, parallelism: int, restored: Any | None) -> Any:
        raise RuntimeError("no splits for you")


def test_a_failing_enumerator_fails_the_job_naming_the_source(checkpoint_dir):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_restart_strategy(RestartStrategy.fixed_delay(1, 0))
    env.from_source(_BrokenEnumerator(1, 10), source_name="numbers").sink_to(DiscardingSink())
    with pytest.raises(
        JobExecutionError,
        match=r"coordinator start of operator 'Source: numbers' raised RuntimeError: no splits for you",
    ) as info:
        env.execute("broken-enumerator", executor="local")
    assert "User traceback" in str(info.value) and "after 1 restart(s)" in str(info.value)


def test_a_rescaled_restore_hands_out_the_splits_nobody_had_yet(checkpoint_dir, tmp_path):
    """Splits left with the enumerator at a savepoint go to the new subtasks."""
    out = str(tmp_path / "out")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_source(OneSplitEach(0, 199), source_name="slow").map(lambda x: x).sink_to(FileSink(out))
    client = env.execute_async("rescale-splits", executor="local")
    assert all(read.wait(30) for read in FIRST_SPLIT_READ)
    savepoint = client.stop(str(tmp_path / "sp"))
    (handle,) = read_metadata(savepoint)["coordinators"].values()
    assert len(read_state(handle_from_json(handle))) == 6  # two splits were handed out, six not yet
    env2 = StreamExecutionEnvironment.get_execution_environment().set_parallelism(3)
    env2.enable_checkpointing(50)
    env2.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env2.restore_from_savepoint(savepoint)
    env2.from_source(EightSplits(0, 199), source_name="slow").map(lambda x: x).sink_to(FileSink(out))
    env2.execute("rescale-splits-2", executor="local")
    assert sorted(read_committed(out)) == list(range(200))


def test_periodic_async_calls_run_off_the_loop_and_their_handlers_on_it():
    h, _ = _holder()
    results: list[tuple[Any, Any]] = []
    h.call_async(lambda: "once", lambda r, e: results.append((r, e)))
    h.call_async(lambda: 1 / 0, lambda r, e: results.append((r, type(e).__name__)), period_s=5.0)
    due = h.due_calls(now=0.0)
    assert len(due) == 2 and h.due_calls(now=0.0) == []  # running: not due again until done
    for call in due:
        try:
            h.call_done(call, call.call(), None, now=1.0)
        except ZeroDivisionError as exc:
            h.call_done(call, None, exc, now=1.0)
    assert results == [("once", None), (None, "ZeroDivisionError")]
    assert h.due_calls(now=5.9) == [] and len(h.due_calls(now=6.0)) == 1  # the periodic one, 5 s after it ended
    with pytest.raises(ValueError, match="period_s must be positive"):
        h.call_async(lambda: None, lambda r, e: None, period_s=0)


class _Discovering(SequenceSource):
    """An unbounded source whose enumerator finds one new range of ten numbers per
    discovery, every 20 ms, until it has found ``ranges``; then its readers end."""

    bounded = False

    def create_enumerator(self, parallelism: int, restored: Any | None) -> Any:
        return _DiscoveringEnumerator(restored or (0, []))


class _DiscoveringEnumerator(StaticSplitEnumerator):
    RANGES = 5

    def __init__(self, state: tuple[int, list[Any]]) -> None:
        self.found, remaining = state
        super().__init__(remaining, dynamic=True)
        self.waiting: set[int] = set()

    def start(self, context: Any) -> None:
        self.context = context
        context.call_async(lambda: self.found, self._found, period_s=0.02)

    def _found(self, n: int, error: BaseException | None) -> None:
        assert error is None
        if n < self.RANGES:
            self.remaining.append((n, IndexSplit(n, n * 10, n * 10 + 10)))
            self.found = n + 1
        for subtask in sorted(self.waiting):
            self.waiting.discard(subtask)
            self.handle_split_request(subtask, self.context)

    def handle_split_request(self, subtask: int, context: Any) -> None:
        if self.remaining or self.found >= self.RANGES:
            super().handle_split_request(subtask, context)
        else:
            self.waiting.add(subtask)  # answered when a discovery finds more

    def snapshot_state(self) -> Any:
        return (self.found, list(self.remaining))


def test_an_enumerator_discovers_splits_while_the_job_runs(checkpoint_dir, tmp_path):
    out = str(tmp_path / "out")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.enable_checkpointing(30)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.from_source(_Discovering(0, 0), source_name="discovering").sink_to(FileSink(out))
    env.execute("discovering", executor="local")
    assert sorted(read_committed(out)) == list(range(50))
