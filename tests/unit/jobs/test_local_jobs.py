"""Whole jobs on the in-process executor: the same tasks and job master as on Ray."""

from __future__ import annotations

import os
import random
import threading

import pytest

from tests.checker import check_running_sums
from tests.kills import kill_one_at_random
from weir import (
    DiscardingSink,
    InvalidConfigurationError,
    InvalidJobGraphError,
    JobExecutionError,
    JobStatus,
    KeyedProcessFunction,
    KeySelectionError,
    ListStateDescriptor,
    MapStateDescriptor,
    RecordSerializationError,
    RestartStrategy,
    StreamExecutionEnvironment,
    UserFunctionError,
    ValueStateDescriptor,
)
from weir.connectors.files import FileSink, read_committed
from weir.runtime.errors import UnknownTaskError


def _env(checkpoint_dir: str, p: int = 2, interval_ms: int | None = 50) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(p)
    if interval_ms:
        env.enable_checkpointing(interval_ms)
    env.get_checkpoint_config().set_checkpoint_storage(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.01))
    return env


def _keyed_sum(env, n, out_dir, fail=None):
    def to_kv(i):
        if fail is not None:
            fail(i)
        return (i % 100, 2 * i)

    (
        env.from_sequence(0, n - 1)
        .map(to_kv)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .sink_to(FileSink(out_dir))
    )


def _verdict(out_dir, n):
    return check_running_sums(map(tuple, read_committed(out_dir)), ((i % 100, 2 * i) for i in range(n)))


def test_keyed_sum_is_exact(checkpoint_dir, out_dir):
    env = _env(checkpoint_dir)
    _keyed_sum(env, 50_000, out_dir)
    result = env.execute("local-sum", executor="local")
    v = _verdict(out_dir, 50_000)
    assert (v.lost, v.duplicated, v.keys_wrong, v.outputs) == (0, 0, 0, 50_000)
    assert result.completed_checkpoints >= 1


def test_without_periodic_checkpoints_the_final_checkpoint_still_commits(checkpoint_dir, out_dir):
    env = _env(checkpoint_dir, interval_ms=None)
    _keyed_sum(env, 10_000, out_dir)
    result = env.execute("local-final", executor="local")
    assert _verdict(out_dir, 10_000).exact
    assert result.completed_checkpoints == 1


@pytest.mark.parametrize("seed", range(3))
def test_killed_tasks_restart_from_the_checkpoint_exactly_once(checkpoint_dir, out_dir, seed):
    print(f"seed={seed}")
    rng = random.Random(seed)
    env = _env(checkpoint_dir)
    env.set_batch_size(256)
    n = 300_000
    _keyed_sum(env, n, out_dir)
    client = env.execute_async("local-kills", executor="local")
    kills = 0
    while kills < 3 and not client.status().is_terminal:
        threading.Event().wait(rng.uniform(0.05, 0.3))
        if client.checkpoints() and client.status().name == "RUNNING" and kill_one_at_random(client, rng):
            kills += 1
    result = client.wait(120)
    v = _verdict(out_dir, n)
    assert (v.lost, v.duplicated, v.keys_wrong) == (0, 0, 0), f"seed={seed}: {v}"
    assert 1 <= result.restarts <= kills  # a kill that lands while restarting kills nothing new


def test_a_function_that_raises_once_restarts_and_the_result_is_exact(checkpoint_dir, out_dir, tmp_path):
    marker = str(tmp_path / "raised")  # tasks run copies of the function: remember on disk

    def fail(i):
        if i == 7_000 and not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError("bad record 7000")

    env = _env(checkpoint_dir)
    _keyed_sum(env, 20_000, out_dir, fail)
    result = env.execute("local-once", executor="local")
    assert os.path.exists(marker)
    assert result.restarts == 1
    assert _verdict(out_dir, 20_000).exact


def test_a_function_that_always_raises_fails_the_job_with_operator_record_and_traceback(checkpoint_dir, out_dir):
    def fail(i):
        if i == 42:
            raise ZeroDivisionError("no luck with 42")

    env = _env(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.fixed_delay(2, 0.01))
    _keyed_sum(env, 1_000, out_dir, fail)
    with pytest.raises(JobExecutionError) as info:
        env.execute("local-always", executor="local")
    text = str(info.value)
    assert "failed after 2 restart(s) (restart strategy allows 2)" in text
    assert "map function of operator 'Map' raised ZeroDivisionError: no luck with 42 on record 42" in text
    assert "in fail" in text  # the user's own frame from the traceback
    assert isinstance(info.value.__cause__, UserFunctionError)
    assert isinstance(info.value.__cause__.__cause__, ZeroDivisionError)


def test_an_unpicklable_record_names_the_operator(checkpoint_dir, out_dir):
    env = _env(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.no_restart())
    (
        env.from_sequence(0, 9)
        .map(lambda i: (i, threading.Lock()))
        .name("attach-lock")
        .key_by(lambda r: r[0])
        .reduce(lambda a, b: a)
        .sink_to(DiscardingSink())
    )
    with pytest.raises(
        JobExecutionError,
        match=r"operator 'attach-lock' emitted a record that cannot be pickled: \(\d+, <unlocked _thread.lock",
    ) as info:
        env.execute("local-unpicklable", executor="local")
    assert isinstance(info.value.__cause__, RecordSerializationError)


def test_an_unhashable_key_names_the_operator_and_the_record(checkpoint_dir):
    env = _env(checkpoint_dir)
    env.set_restart_strategy(RestartStrategy.no_restart())
    env.from_collection([{"user": ["a"], "n": 1}]).key_by(lambda r: r["user"]).reduce(lambda a, b: a).sink_to(
        DiscardingSink()
    )
    with pytest.raises(
        JobExecutionError,
        match=r"key selector of operator 'Reduce' raised TypeError: key \['a'\] of type list has no stable hash.* on record \{'user': \['a'\], 'n': 1\}",
    ) as info:
        env.execute("local-unhashable", executor="local")
    assert isinstance(info.value.__cause__, KeySelectionError)


class _Dedupe(KeyedProcessFunction):
    """Counts per key with ValueState, remembers seen values in MapState and the
    order in ListState; emits (key, count, distinct, first_two)."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))
        self.seen = ctx.get_map_state(MapStateDescriptor("seen"))
        self.order = ctx.get_list_state(ListStateDescriptor("order"))

    def process_element(self, value, ctx):
        self.count.update(self.count.value() + 1)
        if not self.seen.contains(value[1]):
            self.seen.put(value[1], True)
            self.order.add(value[1])
        yield (ctx.get_current_key(), self.count.value(), len(self.seen.keys()), list(self.order.get())[:2])


def test_keyed_process_function_with_value_map_and_list_state(checkpoint_dir, out_dir):
    env = _env(checkpoint_dir)
    data = [("a", 1), ("b", 5), ("a", 1), ("a", 2), ("b", 5)]
    env.from_collection(data).set_parallelism(1).key_by(lambda r: r[0]).process(_Dedupe()).sink_to(FileSink(out_dir))
    env.execute("local-process", executor="local")
    out = sorted(map(tuple, read_committed(out_dir)), key=lambda r: (r[0], r[1]))
    assert out == [("a", 1, 1, [1]), ("a", 2, 1, [1]), ("a", 3, 2, [1, 2]), ("b", 1, 1, [5]), ("b", 2, 1, [5])]


def test_flat_map_filter_union_rebalance_broadcast(checkpoint_dir, out_dir):
    env = _env(checkpoint_dir)
    a = env.from_collection(["a b", "c"]).flat_map(str.split)
    b = env.from_sequence(1, 3).map(str).filter(lambda s: s != "2")
    a.union(b).rebalance().map(str.upper).broadcast().map(lambda s: s).set_parallelism(2).sink_to(FileSink(out_dir))
    env.execute("local-shapes", executor="local")
    assert sorted(read_committed(out_dir)) == sorted(["A", "B", "C", "1", "3"] * 2)


def test_a_kill_during_the_last_kills_failover_waits_for_the_task_and_lands(checkpoint_dir, out_dir):
    """The second kill comes while the first one's failover waits out its restart
    delay: before, it was refused ("has no task sum/0 running"), or taken for a
    finished task; now it waits for the new attempt and kills it."""
    env = _env(checkpoint_dir, p=1)
    env.set_restart_strategy(RestartStrategy.fixed_delay(5, 0.5))
    inputs = [(i % 10, 1) for i in range(20_000)]
    env.from_generator(lambda i: (i % 10, 1), count=20_000, records_per_second=10_000).key_by(lambda kv: kv[0]).sum(
        1
    ).sink_to(FileSink(out_dir))
    client = env.execute_async("local-kill-twice", executor="local")
    client.wait_until(lambda c: any(s["status"] == "COMPLETED" for s in c.checkpoints()))
    client.kill_task("sum", 0)
    client.wait_until(lambda c: "sum/0" not in c.tasks())  # failing over: 0.5 s until it is back
    client.kill_task("sum", 0)
    result = client.wait(60)
    assert result.restarts == 2
    v = check_running_sums(map(tuple, read_committed(out_dir)), inputs)
    assert v.exact, v


def test_restart_after_a_source_finished_skips_it_and_stays_exact(checkpoint_dir, out_dir):
    """FLIP-147: a short source finishes and exits while a long one runs; checkpoints
    go on; a failure then restores with the short source marked finished. The
    finished source is no task to kill: a kill aimed at it would restart nothing."""
    env = _env(checkpoint_dir, p=1)
    short = env.from_collection([(k, 1) for k in range(10)])
    long = env.from_generator(lambda i: (i % 10, 1), count=20_000, records_per_second=40_000)
    short.union(long).key_by(lambda kv: kv[0]).sum(1).sink_to(FileSink(out_dir))
    client = env.execute_async("local-finished-source", executor="local")

    def short_source_exited() -> bool:
        return any(m["task"] == "source-collection/0" and m["state"] == "FINISHED" for m in client.metrics())

    client.wait_until(lambda c: short_source_exited() and sum(s["status"] == "COMPLETED" for s in c.checkpoints()) >= 2)
    assert "source-collection/0" not in client.tasks() and "sum/0" in client.tasks()
    with pytest.raises(UnknownTaskError, match=r"has no task source-collection/0 running \(it finished\)"):
        client.kill_task("source-collection", 0)
    with pytest.raises(
        UnknownTaskError,
        match=r"has no task sum/1 running \(the job has no such task\); its tasks: source-generator/0, sum/0",
    ):
        client.kill_task("sum", 1)
    client.kill_task("sum", 0)
    result = client.wait(60)
    assert result.restarts == 1
    v = check_running_sums(
        map(tuple, read_committed(out_dir)), [(k, 1) for k in range(10)] + [(i % 10, 1) for i in range(20_000)]
    )
    assert v.exact, v


def test_a_function_that_cannot_be_pickled_is_refused_before_the_job_starts(checkpoint_dir):
    env = _env(checkpoint_dir)
    lock = threading.Lock()
    env.from_sequence(0, 9).map(lambda i: (i, lock)).name("holds-lock").sink_to(DiscardingSink())
    with pytest.raises(
        InvalidJobGraphError,
        match=r"operator 'holds-lock' cannot be shipped to its tasks: .*cannot pickle '_thread.lock' object",
    ):
        env.execute("local-unshippable", executor="local")


def test_from_collection_refuses_an_element_that_cannot_be_pickled_naming_it():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(
        InvalidJobGraphError, match=r"from_collection\(\): element 2, <unlocked _thread.lock.*cannot be pickled"
    ):
        env.from_collection([1, 2, threading.Lock()])


def test_from_collection_takes_its_elements_as_they_are_when_called_as_flink_does(checkpoint_dir, out_dir):
    """The collection is pickled once, when from_collection is called (what every
    copy of the job then carries), so later changes to its elements do not show."""
    rows = [{"n": 1}, {"n": 2}]
    env = _env(checkpoint_dir, p=1)
    env.from_collection(rows).sink_to(FileSink(out_dir))
    rows[0]["n"] = 100
    env.execute("local-collection-snapshot", executor="local")
    assert sorted(r["n"] for r in read_committed(out_dir)) == [1, 2]


def test_a_source_pausing_between_records_sends_a_batch_per_buffer_timeout_not_per_record():
    """At 2,000 records/s the source pauses between records; a partly filled
    buffer goes out when the buffer timeout (50 ms) is due, so half a second of
    records travels in a few dozen batches, not one delivery per record."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1).set_buffer_timeout(50)
    (
        env.from_generator(lambda i: (i % 10, i), count=1_000, records_per_second=2_000)
        .key_by(lambda kv: kv[0])
        .reduce(lambda a, b: b)
        .sink_to(DiscardingSink())
    )
    result = env.execute("paced-source", executor="local")
    source = next(m for m in result.metrics if m["task"].startswith("source"))
    assert source["records_out"] == 1_000
    assert source["batches_out"] < 100, f"{source['batches_out']} deliveries for 1,000 records"


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal or a notebook: a suite
    started in the background by a non-interactive shell inherits SIGINT ignored,
    and these tests then waited for their timeout."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_execute_waits_cancels_the_job_and_says_so(capsys, ctrl_c_raises):
    """Issue #16: what happens to a job when its blocking execute() is interrupted
    (Ctrl-C in a terminal, the interrupt button of a notebook): it is cancelled."""
    import signal

    import weir.runtime.local

    clients = []
    submit = weir.runtime.local.LocalExecutor.submit

    def remember(self, graph):
        clients.append(submit(self, graph))
        return clients[-1]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(lambda i: i, records_per_second=1_000).sink_to(DiscardingSink())
    threading.Timer(0.5, os.kill, args=(os.getpid(), signal.SIGINT)).start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(weir.runtime.local.LocalExecutor, "submit", remember)
        with pytest.raises(KeyboardInterrupt):
            env.execute("interrupted", executor="local")
    assert clients[0].status() is JobStatus.CANCELED
    assert (
        "weir: job 'interrupted' cancelled (use execute_async() for a job that runs on without you)"
        in capsys.readouterr().err
    )


def test_ctrl_c_while_execute_submits_cancels_the_job_once_it_is_submitted(capsys, ctrl_c_raises):
    """Issue #29: an interrupt that came while the job was being submitted was
    raised out of the submission: the job ran on, with no client left to cancel
    it (a fresh clone's first run hung here). It is held until the submission
    returns, then the job is cancelled."""
    import signal

    import weir.runtime.local

    clients = []
    submit = weir.runtime.local.LocalExecutor.submit

    def interrupted_while_submitting(self, graph):
        os.kill(os.getpid(), signal.SIGINT)
        signal.sigtimedwait([], 0)  # nothing: it only gives the handler a bytecode boundary before the job starts
        clients.append(submit(self, graph))
        return clients[-1]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator(lambda i: i, records_per_second=1_000).sink_to(DiscardingSink())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(weir.runtime.local.LocalExecutor, "submit", interrupted_while_submitting)
        with pytest.raises(KeyboardInterrupt):
            env.execute("interrupted-early", executor="local")
    assert clients[0].status() is JobStatus.CANCELED
    err = capsys.readouterr().err
    assert (
        "weir: Ctrl-C while job 'interrupted-early' is being submitted: it will be cancelled once it is (Ctrl-C again to stop waiting)"
        in err
    )
    assert "weir: job 'interrupted-early' cancelled" in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_execute_draws_progress_of_records_read_of_the_total_and_checkpoints(monkeypatch, tmp_path):
    import io

    from rich.console import Console

    import weir.runtime.progress

    out = io.StringIO()
    monkeypatch.setattr(weir.runtime.progress, "_console", lambda: Console(file=out, width=120, force_terminal=False))
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2).set_progress_bar(True)
    env.enable_checkpointing(100).get_checkpoint_config().set_checkpoint_storage(str(tmp_path))
    env.from_generator(lambda i: i, count=3_000, records_per_second=6_000).union(env.from_sequence(1, 1_000)).sink_to(
        DiscardingSink()
    )
    env.execute("with-progress", executor="local")
    final = out.getvalue().strip().splitlines()[-1]
    assert final.startswith("with-progress") and "4000/4000 records" in final and "checkpoints" in final, final


def test_no_progress_bar_where_nobody_watches(monkeypatch):
    import ipykernel  # noqa: F401 - imported is not running in a notebook (it was taken for one)

    import weir.runtime.progress

    monkeypatch.setattr(weir.runtime.progress, "_console", lambda: pytest.fail("a progress bar was drawn"))
    env = StreamExecutionEnvironment.get_execution_environment()  # stderr is not a terminal under pytest
    env.from_sequence(1, 10).sink_to(DiscardingSink())
    env.execute("quiet", executor="local")
    with pytest.raises(InvalidConfigurationError, match="progress_bar='yes'"):
        env.set_progress_bar("yes")
