"""A second execute() on one environment runs only what was built since the first,
as PyFlink's (its execute clears the environment's transformations): a notebook
that runs a pipeline, then adds another and executes again, must not run the
first one twice. In-process executor."""

from __future__ import annotations

import re

import pytest

from tests.pausing import GatedGenerator
from weir.actors.ledger import Application, Conflict, JobAssignment, PoolLedger, PoolSettings
from weir.connectors.files import FileSink, read_committed
from weir.runtime import InvalidJobGraphError, JobStatus, StreamExecutionEnvironment, progress


def _env(tmp_path) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/chk")
    return env


def test_a_second_execute_runs_only_the_pipeline_built_after_the_first(tmp_path):
    env = _env(tmp_path)
    env.from_collection([1, 2, 3]).sink_to(FileSink(str(tmp_path / "first")))
    env.execute("first", executor="local")
    env.from_collection([10, 20]).sink_to(FileSink(str(tmp_path / "second")))
    assert [t.name for t in env.get_job_graph().sinks] == ["Sink: FileSink"]
    assert env.execute("second", executor="local").status is JobStatus.FINISHED
    assert sorted(read_committed(str(tmp_path / "second"))) == [10, 20]
    assert sorted(read_committed(str(tmp_path / "first"))) == [1, 2, 3], "the first pipeline ran again"


def test_execute_async_then_execute_runs_each_pipeline_once(tmp_path):
    env = _env(tmp_path)
    env.from_collection([1, 2, 3]).sink_to(FileSink(str(tmp_path / "first")))
    client = env.execute_async("first", executor="local")
    env.from_collection([10, 20]).sink_to(FileSink(str(tmp_path / "second")))  # while the first runs
    env.execute("second", executor="local")
    assert client.wait(30).status is JobStatus.FINISHED
    assert sorted(read_committed(str(tmp_path / "first"))) == [1, 2, 3]
    assert sorted(read_committed(str(tmp_path / "second"))) == [10, 20]


def test_an_execute_with_nothing_built_since_the_last_names_the_job_that_ran_it(tmp_path):
    env = _env(tmp_path)
    env.from_collection([1]).sink_to(FileSink(str(tmp_path / "out")))
    env.execute("ran-it", executor="local")
    message = r"the job has no sink: the execute\(\) of job 'ran-it' already ran the operators built before it"
    with pytest.raises(InvalidJobGraphError, match=message):
        env.execute("again", executor="local")
    with pytest.raises(InvalidJobGraphError, match=message):
        env.execute_async("again", executor="local")
    with pytest.raises(InvalidJobGraphError, match=message):
        env.get_job_graph()
    with pytest.raises(
        InvalidJobGraphError, match=r"the job has no sink: add sink_to\(...\) or print\(\) before execute\(\)"
    ):
        _env(tmp_path).execute("never-built", executor="local")  # an environment that never ran: the error as before
    assert read_committed(str(tmp_path / "out")) == [1]


def test_get_job_graph_clears_nothing(tmp_path):
    env = _env(tmp_path)
    env.from_collection([1, 2]).sink_to(FileSink(str(tmp_path / "out")))
    env.get_job_graph("look")
    env.get_job_graph("look")
    env.execute("runs", executor="local")
    assert sorted(read_committed(str(tmp_path / "out"))) == [1, 2]


def test_a_stream_built_before_an_execute_can_feed_a_pipeline_built_after_it(tmp_path):
    """As in PyFlink: the environment forgets its sinks, not the streams a user still holds."""
    env = _env(tmp_path)
    numbers = env.from_collection([1, 2, 3])
    numbers.sink_to(FileSink(str(tmp_path / "first")))
    env.execute("first", executor="local")
    numbers.map(lambda x: x * 10).sink_to(FileSink(str(tmp_path / "second")))
    env.execute("second", executor="local")
    assert sorted(read_committed(str(tmp_path / "second"))) == [10, 20, 30]
    assert sorted(read_committed(str(tmp_path / "first"))) == [1, 2, 3]


def test_execute_and_collect_runs_the_other_sinks_once_and_clears_them(tmp_path):
    env = _env(tmp_path)
    env.from_collection([1, 2, 3]).sink_to(FileSink(str(tmp_path / "files")))
    letters = env.from_collection(["x", "y"])
    assert sorted(letters.execute_and_collect(executor="local", limit=5)) == ["x", "y"]
    assert sorted(letters.execute_and_collect(executor="local", limit=5)) == ["x", "y"]  # its own sink each time
    assert sorted(read_committed(str(tmp_path / "files"))) == [1, 2, 3], "the file sink ran with the second collect too"
    with pytest.raises(
        InvalidJobGraphError, match=r"the execute\(\) of job 'collect-[0-9a-f]{12}' already ran the operators"
    ):
        env.execute(executor="local")


def test_the_progress_bars_total_counts_the_sources_of_this_run_only(tmp_path, monkeypatch):
    """It summed every source ever built on the environment: the first run's, and
    sources no sink reads."""
    totals = []
    monkeypatch.setattr(progress, "watch", lambda client, graph, total: (totals.append(total), client.wait(30))[1])
    env = _env(tmp_path).set_progress_bar(True)
    env.from_collection([1, 2, 3]).sink_to(FileSink(str(tmp_path / "first")))
    env.execute("first", executor="local")
    env.from_collection(list(range(100)))  # read by no sink
    env.from_collection([10, 20]).sink_to(FileSink(str(tmp_path / "second")))
    env.execute("second", executor="local")
    assert totals == [3, 2]


def test_a_submission_that_is_refused_keeps_the_pipeline_for_a_retry(tmp_path, monkeypatch):
    """weir clears after the submission, PyFlink before it: a job refused before
    it ran (a name in use, no cluster) did not run what was built."""
    from weir.runtime import WeirError, datastream

    class Refusing:
        def submit(self, graph):
            raise WeirError(f"a job named '{graph.name}' is running")

    env = _env(tmp_path)
    env.from_collection([1, 2]).sink_to(FileSink(str(tmp_path / "out")))
    real = datastream.find_executor
    monkeypatch.setattr(datastream, "find_executor", lambda name: Refusing() if name == "refusing" else real(name))
    with pytest.raises(WeirError, match="is running"):
        env.execute("taken", executor="refusing")
    with pytest.raises(WeirError, match="is running"):
        env.execute_async("taken", executor="refusing")
    env.execute("free", executor="local")
    assert sorted(read_committed(str(tmp_path / "out"))) == [1, 2]


def test_what_a_submitted_job_reads_in_the_driver_lives_on_after_the_environment_forgets_its_pipeline(
    tmp_path, monkeypatch
):
    """A DataFrame's Arrow cache in Spark lives as long as its source object in
    the driver. Ray's executor sends the job graph to the cluster as bytes, so
    once execute_async() cleared the environment's pipeline nothing held the
    source: a garbage collection released the cache while the job read it
    ("Still cannot get the block after recache!"), and the job failed. The
    environment keeps what it submitted."""
    import gc
    import weakref

    import cloudpickle

    import weir.runtime.datastream
    from weir.runtime.sources import SequenceSource

    class SendsBytes:  # as Ray's executor: the graph leaves the driver pickled
        def submit(self, graph):
            sent.append(cloudpickle.dumps(graph))
            return object()

    sent: list[bytes] = []
    monkeypatch.setattr(weir.runtime.datastream, "find_executor", lambda name: SendsBytes())
    env = _env(tmp_path)
    source = SequenceSource(0, 10)
    alive = weakref.ref(source)
    env.from_source(source).sink_to(FileSink(str(tmp_path / "out")))
    del source
    env.execute_async("keeps-its-source")
    gc.collect()
    assert sent and alive() is not None, "the submitted job's source was collected in the driver"


def test_unnamed_jobs_pass_the_clusters_one_name_rule_and_a_given_name_keeps_it(tmp_path):
    """Two notebook cells that execute() without a name: one name runs once at a
    time on a cluster (the pool's ledger refuses a second), and both cells used
    to get 'weir-job', so the second was refused while PyFlink runs them side by
    side. Each unnamed job now gets a name of its own; a name the user gives is
    kept, and the rule holds for it."""
    ledger = PoolLedger(PoolSettings(idle_slots=0, idle_coordinators=0))
    notebook = Application("notebook", "host pid 1")

    def reserve(graph):
        ledger.add_coordinator(f"coordinator-{graph.run_id}", "env")  # an idle one, up for the job
        assignment = JobAssignment(graph.name, graph.run_id, b"", notebook, graph.outputs, 0.0, {})
        return ledger.reserve(assignment, {}, "env", 0.0)

    env = _env(tmp_path)
    env.from_collection([1, 2]).print()
    first, second = env.get_job_graph(), env.get_job_graph()
    assert re.fullmatch(r"weir-job-[0-9a-f]{12}", first.name) and first.name == f"weir-job-{first.run_id}"
    assert reserve(first) == f"coordinator-{first.run_id}"
    assert reserve(second) == f"coordinator-{second.run_id}", "the second unnamed job was refused"
    assert reserve(env.get_job_graph("mine")) is not None
    refused = reserve(env.get_job_graph("mine"))
    assert isinstance(refused, Conflict) and refused.job == "mine"


def test_two_unnamed_jobs_run_side_by_side_each_under_a_name_of_its_own(tmp_path):
    gate = tmp_path / "gate"
    env = _env(tmp_path)
    clients = []
    for out in ("first", "second"):  # each reads 5 records, then waits for the gate
        env.from_source(GatedGenerator(lambda i: i, 10, str(gate), free=5)).sink_to(FileSink(str(tmp_path / out)))
        clients.append(env.execute_async(executor="local"))
    for client in clients:
        client.wait_until(lambda c: c.status() is JobStatus.RUNNING)
    assert clients[0].status() is clients[1].status() is JobStatus.RUNNING  # at once: neither can end before the gate
    names = [c.job_name for c in clients]
    assert names[0] != names[1] and all(re.fullmatch(r"weir-job-[0-9a-f]{12}", n) for n in names), names
    letters = env.from_collection(["x", "y"])
    with letters.execute_and_collect(executor="local") as one, letters.execute_and_collect(executor="local") as two:
        names = [one.job_client.job_name, two.job_client.job_name]
        assert names[0] != names[1] and all(re.fullmatch(r"collect-[0-9a-f]{12}", n) for n in names), names
        assert sorted(one) == sorted(two) == ["x", "y"]
    gate.touch()
    assert [c.wait(30).status for c in clients] == [JobStatus.FINISHED, JobStatus.FINISHED]
    assert sorted(read_committed(str(tmp_path / "first"))) == sorted(read_committed(str(tmp_path / "second")))
    assert sorted(read_committed(str(tmp_path / "first"))) == list(range(10))
