"""The task lifecycle (runtime/lifecycle.py) against Flink's Task Lifecycle page
and FLIP-147, one rule per test, driven by hand through TaskHarness."""

from __future__ import annotations

import pytest

from weir.runtime.events import EndOfData, EndOfPartition, Watermark, WatermarkStatus
from weir.runtime.functions import KeyedProcessFunction, as_callable
from weir.runtime.lifecycle import TRANSITIONS, Lifecycle, LifecycleError, Phase
from weir.runtime.operators import KeyedProcessOperator, StreamOperator
from weir.runtime.sinks import Sink, SinkOperator, SinkWriter
from weir.runtime.storage import read_state
from weir.runtime.task import OperatorRestore, TaskState
from weir.runtime.testing import TaskHarness
from weir.runtime.watermark_valve import WatermarkValve


def test_the_phases_and_their_moves_are_data():
    life = Lifecycle("t/0")
    for phase in (Phase.DRAINING, Phase.FINISHED, Phase.CLOSING, Phase.ENDED):
        life.to(phase)
    with pytest.raises(LifecycleError, match="ENDED -> RUNNING is not a legal move"):
        life.to(Phase.RUNNING)
    assert life.phase is Phase.ENDED
    # Every phase but ENDED can fail into CLOSING; nothing leaves ENDED.
    assert all(Phase.CLOSING in TRANSITIONS[p] for p in Phase if p not in (Phase.CLOSING, Phase.ENDED))
    assert TRANSITIONS[Phase.ENDED] == frozenset()


# ---------------------------------------------------------------- 1. nothing after finish
class _Ticker(StreamOperator):
    """Passes records on, and emits a tick at each processing-time timer (every 10 ms)."""

    def __init__(self, name, uid):
        super().__init__(name, uid)
        self.next_ms = 0

    def process_batch(self, records, timestamps=None):
        self.output.collect(records)

    def next_processing_timer(self):
        return self.next_ms

    def on_processing_time(self, now_ms):
        self.next_ms = now_ms + 10
        self.output.collect([f"tick@{now_ms}"])


def _storage(tmp_path):
    return "file://" + str(tmp_path / "chk")


@pytest.mark.parametrize("drain", [True, False])
def test_no_processing_timer_fires_once_the_input_ended(tmp_path, drain):
    """Finished (drain) or suspended (stop without drain): timers that come due
    later do not fire, so nothing follows EndOfData downstream."""
    h = TaskHarness([("ticker", _Ticker)], 1, _storage(tmp_path))
    h.processing_time(100)
    h.deliver(0, ["a"], EndOfData(drain=drain))
    h.processing_time(200)
    h.processing_time(300)
    assert h.records_sent == ["tick@100", "a"]
    assert h.task.state is TaskState.FINISHING and h.result is None


class _Reminder(KeyedProcessFunction):
    def process_element(self, value, ctx):
        ctx.timer_service().register_processing_time_timer(1_000)
        yield value

    def on_timer(self, timestamp, ctx):
        yield f"reminder for {ctx.get_current_key()}"


def _keyed_process(name, uid):
    f = _Reminder()
    return KeyedProcessOperator(name, uid, f, as_callable(f, "process_element", "process()"), lambda v: v)


def _processing_timers(h, checkpoint_id):
    ((_, handle, _),) = [a for a in h.ports.acks if a[0] == checkpoint_id]
    keyed = read_state(handle)["process"].keyed
    return dict(keyed.tables.get("_timers/processing", {}))


def test_at_end_of_input_processing_timers_not_due_are_dropped(tmp_path):
    h = TaskHarness([("process", _keyed_process)], 1, _storage(tmp_path))
    h.deliver(0, ["x"], h.barrier(1))
    assert _processing_timers(h, 1) == {"x": {(1_000, None)}}
    h.deliver(0, EndOfData(drain=True), h.barrier(2))
    h.processing_time(5_000)
    assert h.records_sent == ["x"]
    assert _processing_timers(h, 2) == {}, "the finished operator's snapshot holds no timer"


def test_a_suspended_task_keeps_its_timers_for_the_resume(tmp_path):
    h = TaskHarness([("process", _keyed_process)], 1, _storage(tmp_path))
    h.deliver(0, ["x"], EndOfData(drain=False), h.barrier(1))
    h.processing_time(5_000)
    assert h.records_sent == ["x"]
    assert _processing_timers(h, 1) == {"x": {(1_000, None)}}


class _EmitsOnNotify(StreamOperator):
    def process_batch(self, records, timestamps=None):
        pass

    def notify_checkpoint_complete(self, checkpoint_id):
        self.output.collect([f"late {checkpoint_id}"])


def test_output_after_end_of_data_is_an_error_naming_the_operator(tmp_path):
    h = TaskHarness([("late emitter", _EmitsOnNotify)], 1, _storage(tmp_path))
    h.deliver(0, EndOfData(drain=True), h.barrier(1))
    h.notify_complete(1)
    assert h.result.state is TaskState.FAILED
    assert "operator 'late emitter' emitted records after the end of its input" in h.result.error_text
    assert h.records_sent == []


# ---------------------------------------------------------------- 2. the watermark valve
def test_a_stopped_channel_keeps_holding_the_watermark():
    """Channel 1 stops (EndOfData without drain) at 50 while channel 0 goes on to
    100: the task's watermark stays at 50, or windows would fire with part of
    their contents before the savepoint and again after the resume."""
    valve = WatermarkValve(2)
    assert valve.on_watermark(0, 60) == [] and valve.on_watermark(1, 50) == [Watermark(50)]
    assert valve.on_end_of_data(1, drain=False) == []
    assert valve.on_watermark(0, 100) == []
    assert valve.watermark == 50


def test_a_drained_channel_no_longer_holds_the_watermark_and_idleness_still_counts():
    valve = WatermarkValve(3)
    valve.on_watermark(0, 10)
    valve.on_watermark(1, 20)
    assert valve.on_end_of_data(2, drain=True) == [Watermark(10)]
    assert valve.on_status(0, idle=True) == [Watermark(20)]
    assert valve.on_status(1, idle=True) == [WatermarkStatus(True)]
    assert valve.on_watermark(0, 30) == [WatermarkStatus(False), Watermark(30)]


class _WatermarkLog(StreamOperator):
    seen: list[int] = []

    def process_batch(self, records, timestamps=None):
        pass

    def process_watermark(self, watermark):
        self.seen.append(watermark.timestamp)


def test_in_a_task_a_channel_stopped_early_holds_the_watermark_of_the_other(tmp_path):
    _WatermarkLog.seen = []
    h = TaskHarness([("log", _WatermarkLog)], 2, _storage(tmp_path))
    h.deliver(0, Watermark(60))
    h.deliver(1, Watermark(50), EndOfData(drain=False))
    h.deliver(0, Watermark(100))
    assert _WatermarkLog.seen == [50] and h.task.metrics()["watermark"] == 50


# ---------------------------------------------------------------- 3. end_input, open and finish order
class _Recorder(StreamOperator):
    log: list[str] = []

    def open(self):
        self.log.append(f"open {self.name}")

    def process_batch(self, records, timestamps=None):
        self.output.collect(records)

    def end_input(self, input_index):
        self.log.append(f"end_input({input_index}) {self.name}")

    def finish(self):
        self.log.append(f"finish {self.name}")
        self.output.collect([f"from finish of {self.name}"])

    def close(self):
        self.log.append(f"close {self.name}")


def _chain(tmp_path, **kw):
    _Recorder.log = []
    return TaskHarness([(n, _Recorder) for n in ("a", "b", "c")], 1, _storage(tmp_path), **kw)


def test_a_chain_opens_last_to_first_then_ends_input_and_finishes_each_operator_first_to_last(tmp_path):
    h = _chain(tmp_path)
    assert _Recorder.log == ["open c", "open b", "open a"]
    h.deliver(0, ["r"], EndOfData(drain=True), h.barrier(1), EndOfPartition())
    h.notify_complete(1)
    assert _Recorder.log[3:] == [
        "end_input(0) a",
        "finish a",
        "end_input(0) b",
        "finish b",
        "end_input(0) c",
        "finish c",
        "close a",
        "close b",
        "close c",
    ]
    assert h.records_sent == ["r", "from finish of a", "from finish of b", "from finish of c"]
    assert h.result.state is TaskState.FINISHED


@pytest.mark.parametrize("how", ["cancel", "failure"])
def test_on_a_cancel_or_a_failure_only_close_runs(tmp_path, how):
    h = _chain(tmp_path)
    if how == "cancel":
        h.cancel()
    else:
        h.deliver(0, "not a list of records")  # a broken delivery fails the task
    assert h.result.state is (TaskState.CANCELED if how == "cancel" else TaskState.FAILED)
    assert _Recorder.log[3:] == ["close a", "close b", "close c"]


# ---------------------------------------------------------------- 4. fully finished stays finished
def _finished_restore(tmp_path, *finished):
    """A restore where the operators named are fully finished (no state files)."""
    return {name: OperatorRestore([None], fully_finished=True) for name in finished}


def test_operators_restored_fully_finished_are_neither_opened_nor_finished_again(tmp_path):
    h = _chain(tmp_path, restore=_finished_restore(tmp_path, "a", "b"))
    assert _Recorder.log == ["open c", "end_input(0) c", "finish c"], "only the operator that had not finished runs"
    assert h.task.state is TaskState.FINISHING and h.records_sent == ["from finish of c"]


def test_a_record_reaching_a_fully_finished_operator_is_an_error_naming_it(tmp_path):
    h = _chain(tmp_path, restore=_finished_restore(tmp_path, "a", "b", "c"))
    h.deliver(0, ["stray"])
    assert h.result.state is TaskState.FAILED
    assert "operator 'a' had fully finished before the restore, yet got 1 records" in h.result.error_text


class _NeedsOpen(StreamOperator):
    """A user's operator: snapshot_state and the notifications use what open() made."""

    def open(self):
        self.ledger = []

    def process_batch(self, records, timestamps=None):
        self.output.collect(records)

    def snapshot_state(self, checkpoint_id):
        self.ledger.append(f"snapshot {checkpoint_id}")
        return super().snapshot_state(checkpoint_id)

    def notify_checkpoint_complete(self, checkpoint_id):
        self.ledger.append(f"complete {checkpoint_id}")

    def notify_checkpoint_aborted(self, checkpoint_id):
        self.ledger.append(f"aborted {checkpoint_id}")


def test_an_operator_restored_fully_finished_is_not_snapshotted_nor_notified_and_stays_finished(tmp_path):
    """It was never opened, so it is not called at all (before, its snapshot_state
    raised AttributeError at every checkpoint until the restarts ran out); its
    checkpoints still say it finished, so it stays finished after the next restore."""
    _Recorder.log = []
    restore = _finished_restore(tmp_path, "done")
    h = TaskHarness([("done", _NeedsOpen), ("c", _Recorder)], 1, _storage(tmp_path), restore=restore)
    h.deliver(0, EndOfPartition())
    h.trigger(1)
    h.notify_aborted(1)
    h.trigger(2)
    h.notify_complete(2)
    assert h.result.state is TaskState.FINISHED, h.result.error_text
    assert not hasattr(h.task.operators[0], "ledger")
    acks = [(cid, ops["done"].finished_on_restore, ops["c"].finished_on_restore) for cid, _, ops in h.ports.acks]
    assert acks == [(1, True, False), (2, True, False)]
    assert _Recorder.log == ["open c", "end_input(0) c", "finish c", "close c"]


# ---------------------------------------------------------------- 5. sinks finish; close aborts what no checkpoint will commit
class _TransactionPerCheckpoint(Sink):
    """A writer that opens a transaction per checkpoint, as Flink's two-phase
    commit sinks do: every checkpoint pre-commits one, even an empty one."""

    def __init__(self):
        self.log: list[str] = []

    def create_writer(self, ctx):
        sink = self

        class Writer(SinkWriter):
            def write(self, records):
                sink.log.extend(f"write {r}" for r in records)

            def finish(self):
                sink.log.append("finish")

            def prepare_commit(self, checkpoint_id):
                return [f"txn-{checkpoint_id}"]

            def commit(self, committables):
                sink.log.extend(f"commit {c}" for c in committables)

            def abort(self, committables):
                sink.log.extend(f"abort {c}" for c in committables)

        return Writer()


def test_a_finished_sink_commits_42_and_43_and_aborts_44(tmp_path):
    sink = _TransactionPerCheckpoint()
    h = TaskHarness([("sink", lambda n, u: SinkOperator(n, u, sink))], 1, _storage(tmp_path))
    h.deliver(0, ["r"], EndOfData(drain=True))
    for cid in (42, 43, 44):
        h.deliver(0, h.barrier(cid))
    h.deliver(0, EndOfPartition())
    h.notify_complete(43)
    assert h.result.state is TaskState.FINISHED
    assert sink.log == ["write r", "finish", "commit txn-42", "commit txn-43", "abort txn-44"]


def test_a_failed_sink_aborts_nothing_for_the_restore_commits_it(tmp_path):
    sink = _TransactionPerCheckpoint()
    h = TaskHarness([("sink", lambda n, u: SinkOperator(n, u, sink))], 1, _storage(tmp_path))
    h.deliver(0, ["r"], h.barrier(1))
    h.cancel()
    assert h.result.state is TaskState.CANCELED and sink.log == ["write r"]


class _EmitsInClose(StreamOperator):
    def process_batch(self, records, timestamps=None):
        pass

    def close(self):
        self.output.collect(["too late"])


def test_close_may_not_emit_and_the_error_names_the_operator(tmp_path):
    h = TaskHarness([("closer", _EmitsInClose)], 1, _storage(tmp_path))
    h.deliver(0, EndOfData(drain=True), h.barrier(1), EndOfPartition())
    h.notify_complete(1)
    assert h.result.state is TaskState.FAILED
    assert "operator 'closer' emitted records in close(); emit them in finish()" in h.result.error_text


def test_broadcast_state_is_restored_from_a_running_subtask_not_a_finished_one():
    """FLIP-147: a finished subtask's copy may be behind; a running one's is taken."""
    from weir.runtime.state import OperatorSnapshot, broadcast_copy

    finished = OperatorSnapshot(broadcast={"rules": {"old": 1}}, finished=True)
    running = OperatorSnapshot(broadcast={"rules": {"new": 2}})
    assert [broadcast_copy([finished, running], i) for i in range(2)] == [{"rules": {"new": 2}}] * 2
