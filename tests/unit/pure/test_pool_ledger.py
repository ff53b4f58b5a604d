"""The slot pool's rules, on its Ray-free ledger (actors/ledger.py), with time
and free CPUs given by hand: which application's processes a job may use, one
running job per name and per output, and when spare processes start or retire."""

from __future__ import annotations

import itertools

import pytest

from weir.actors.ledger import Application, Conflict, JobAssignment, PoolLedger, PoolSettings, Shape

SHAPE = Shape(options={"num_cpus": 0.5}, runtime_env={})
CPUS = 16.0
A, B = Application("app-a", "host-a pid 1"), Application("app-b", "host-b pid 2")


class Pool:
    """A ledger and the processes it asks for, all of which start at once."""

    def __init__(self, **settings: object) -> None:
        self.ledger = PoolLedger(PoolSettings(**{"idle_slots": 0, "idle_coordinators": 0, **settings}))
        self._ids = itertools.count()
        self.started = {"slots": 0, "coordinators": 0}

    def lease(self, job: str, app: Application, count: int, now: float = 0.0, shape: Shape = SHAPE) -> list[str]:
        taken, missing = self.ledger.lease(job, app.id, shape, count, now)
        for _ in range(missing):
            sid = self._slot(shape.key, job, app.id)
            taken.append(sid)
        return taken

    def _slot(self, shape: str, job: str | None = None, app: str | None = None) -> str:
        sid = f"slot-{next(self._ids)}"
        self.ledger.add_slot(sid, shape, job, app)
        self.started["slots"] += 1
        return sid

    def refill(self, now: float, free: float = CPUS):
        plan = self.ledger.refill(now, free)
        for key in plan.new_slots:
            self._slot(key)
        for env in plan.new_coordinators:
            self.ledger.add_coordinator(f"coordinator-{next(self._ids)}", env)
            self.started["coordinators"] += 1
        return plan

    def up(self) -> None:
        for sid in self.ledger.slots:
            self.ledger.slot_up(sid, "node-1")
        for c in self.ledger.coordinators.values():
            c.up = True

    def submit(
        self, name: str, app: Application, outputs: dict[str, str] | None = None, now: float = 0.0
    ) -> str | Conflict:
        assignment = JobAssignment(name, f"run-{name}", b"", app, outputs or {}, 0.0, {})
        outcome = self.ledger.reserve(assignment, {}, "env", now)
        if outcome is None:
            outcome = f"coordinator-{next(self._ids)}"
            self.ledger.add_coordinator(outcome, "env")
            self.ledger.place_job(assignment, outcome)
        return outcome


@pytest.fixture
def pool() -> Pool:
    return Pool()


def _started_at(pool: Pool, t: float) -> int:
    """Run one refill round at time t; how many slots have started so far."""
    pool.refill(t)
    return pool.started["slots"]


def _running_job_of_4(pool: Pool) -> list[str]:
    leased = pool.lease("job", A, 4)  # nothing idle: 4 new slots, the job's own
    pool.up()
    return leased


# ---------------------------------------------------------------- applications
def test_a_slot_that_ran_one_applications_job_never_serves_another_application(pool):
    first = pool.lease("a-1", A, 2)
    pool.up()
    for sid in first:
        assert pool.ledger.give_back("a-1", sid, now=1.0)
    b = pool.lease("b-1", B, 2, now=2.0)
    assert not set(b) & set(first), "application B got a process that ran A's code"
    assert set(pool.lease("a-2", A, 2, now=3.0)) == set(first), "A's next job reuses A's slots"


def test_an_applications_next_job_takes_its_own_idle_slots_before_fresh_ones(pool):
    mine = pool.lease("a-1", A, 1)
    pool.up()
    pool.ledger.give_back("a-1", mine[0], now=1.0)
    fresh = pool._slot(SHAPE.key)
    pool.up()
    assert pool.lease("a-2", A, 1, now=2.0) == mine
    assert pool.lease("b-1", B, 1, now=2.0) == [fresh], "a fresh process may go to any application"


def test_when_an_application_ends_its_idle_slots_retire_and_its_running_jobs_slots_leave_with_the_job(pool):
    idle = pool.lease("a-1", A, 1)
    running = pool.lease("a-2", A, 1)
    pool.up()
    pool.ledger.give_back("a-1", idle[0], now=1.0)
    plan = pool.ledger.app_ended(A.id)
    assert plan.retire_slots == idle and running[0] in pool.ledger.slots
    assert not pool.ledger.give_back("a-2", running[0], now=2.0), "a slot of an ended application was kept"
    assert A.id not in pool.ledger.live_apps()


def test_fresh_slots_are_the_refill_target_an_applications_idle_ones_do_not_count(pool):
    pool.ledger.settings = PoolSettings(idle_slots=2, idle_coordinators=0)
    leased = pool.lease("a-1", A, 2)
    pool.up()
    for sid in leased:
        pool.ledger.give_back("a-1", sid, now=0.0)
    assert _started_at(pool, 0.0) == 4, "idle slots of A counted as spares for other applications"
    # (the pool's first round: quiet since it started)


def test_an_applications_idle_slots_retire_after_the_idle_timeout(pool):
    leased = pool.lease("a-1", A, 1)
    pool.up()
    pool.ledger.give_back("a-1", leased[0], now=10.0)
    assert pool.refill(10.0 + pool.ledger.settings.idle_timeout_s - 1).retire_slots == []
    assert pool.refill(10.0 + pool.ledger.settings.idle_timeout_s + 1).retire_slots == leased


def test_an_applications_coordinator_serves_its_next_job_and_never_another_applications(pool):
    first = pool.submit("a-1", A)
    pool.ledger.job_ended(first, now=1.0)
    assert pool.submit("b-1", B) != first, "application B's job went to A's coordinator"
    assert pool.submit("a-2", A) == first


# ---------------------------------------------------------------- one name, one output, one job
def test_a_name_runs_once_until_its_job_ends(pool):
    coordinator = pool.submit("orders", A)
    refused = pool.submit("orders", B)
    assert isinstance(refused, Conflict) and (refused.job, refused.where, refused.location) == ("orders", A.where, None)
    assert isinstance(pool.submit("orders", A), Conflict), "the same driver submitted the running name twice"
    pool.ledger.job_ended(coordinator, now=1.0)
    assert not isinstance(pool.submit("orders", B), Conflict)


def test_an_output_belongs_to_one_running_job(pool):
    coordinator = pool.submit("a", A, {"folder /out": "Sink: FileSink"})
    refused = pool.submit("b", B, {"folder /other": "Sink: two", "folder /out": "Sink: one"})
    assert isinstance(refused, Conflict) and (refused.job, refused.location, refused.operator) == (
        "a",
        "folder /out",
        "Sink: one",
    )
    assert not isinstance(pool.submit("c", B, {"folder /other": "Sink: two"}), Conflict)
    pool.ledger.job_ended(coordinator, now=1.0)
    assert not isinstance(pool.submit("b", B, {"folder /out": "Sink: one"}), Conflict)


def test_a_job_its_coordinator_says_has_ended_frees_its_name_before_the_end_reaches_the_pool(pool):
    pool.submit("orders", A)
    pool.ledger.job_over("orders", "run-of-another-instance")
    assert isinstance(pool.submit("orders", B), Conflict)
    pool.ledger.job_over("orders", "run-orders")
    assert not isinstance(pool.submit("orders", B), Conflict)


def test_a_job_its_coordinator_could_not_load_frees_its_name_and_outputs_and_the_coordinator_serves_on(pool):
    coordinator = pool.submit("orders", A, {"folder /out": "Sink: FileSink"})
    pool.ledger.start_refused("orders", coordinator, now=1.0)
    assert "orders" not in pool.ledger.jobs
    assert pool.submit("orders", A, {"folder /out": "Sink: FileSink"}) == coordinator  # at once, on the same process


def test_a_dead_coordinators_job_goes_to_a_standby_of_its_application_else_a_fresh_one(pool):
    dead = pool.submit("orders", A)
    own = pool.submit("a-old", A)
    pool.ledger.job_ended(own, now=1.0)  # idle now, and A's
    fresh = "coordinator-fresh"
    pool.ledger.add_coordinator(fresh, "env")
    assignment = pool.ledger.jobs["orders"].assignment
    assignment.started = True
    assert pool.ledger.coordinator_died(dead, at=2.0) == (assignment, own, "env")
    assert assignment.incarnation == 1 and pool.ledger.jobs["orders"].coordinator == own
    assert isinstance(pool.submit("orders", B), Conflict), "a job being taken over lost its name"
    assert pool.ledger.coordinator_died(own, at=3.0) == (assignment, fresh, "env")
    assert pool.ledger.coordinator_died(fresh, at=4.0) == (assignment, None, "env"), (
        "no standby: the pool must start one"
    )
    assert assignment.incarnation == 3


def test_a_dead_coordinators_job_still_on_its_way_stays_with_its_submitter_and_ended_records_go(pool):
    dead = pool.submit("ended-here", A)
    pool.ledger.job_ended(dead, now=1.0)
    dead = pool.submit("on-its-way", A)  # the same coordinator, its start not yet returned
    assert pool.ledger.coordinator_died(dead, at=2.0) is None
    assert "ended-here" not in pool.ledger.jobs and pool.ledger.jobs["on-its-way"].assignment.incarnation == 0
    assert (
        pool.ledger.take_over("on-its-way", "env", dead, at=2.0)[1] is None
    )  # the submitter's start returned: it takes it over


def test_a_coordinator_taking_a_job_over_gets_the_exception_history_so_far_and_the_deaths_before_it(pool):
    first = pool.submit("orders", A)
    assignment = pool.ledger.jobs["orders"].assignment
    assignment.started = True
    failure = {"at": 1.5, "task": "count/1", "exception": "RuntimeError", "message": "boom"}
    pool.ledger.exceptions_reported("orders", 0, [failure])
    pool.ledger.add_coordinator("second", "env")
    pool.ledger.coordinator_died(first, at=2.0)
    pool.ledger.exceptions_reported("orders", 0, [{"message": "late"}])  # the dead incarnation's: ignored
    pool.ledger.add_coordinator("third", "env")
    pool.ledger.coordinator_died("second", at=3.0)
    history = assignment.history
    assert [h["exception"] for h in history] == ["JobCoordinatorDied", "JobCoordinatorDied", "RuntimeError"], history
    assert [h["at"] for h in history] == [3.0, 2.0, 1.5] and "incarnation 2" in history[0]["message"]
    assert first[:8] in history[1]["message"] and history[2] == failure


def test_a_coordinator_taking_a_job_over_gets_the_rescales_that_completed(pool):
    pool.submit("j", A)
    pool.ledger.rescaled("j", {"total": 3})
    pool.ledger.rescaled("j", {"total": 1, "source": 2})
    assert pool.ledger.jobs["j"].assignment.rescales == [{"total": 3}, {"total": 1, "source": 2}]


# ---------------------------------------------------------------- when spares start
def test_while_a_job_runs_spares_wait_for_the_refill_delay(pool):
    """A short job's slots come back before the delay, and nothing boots beside it."""
    _running_job_of_4(pool)
    assert _started_at(pool, 0.0) == 4, "a spare started at once beside the job"
    assert _started_at(pool, PoolLedger.REFILL_DELAY_S - 0.1) == 4, "a spare started before the delay"
    assert _started_at(pool, PoolLedger.REFILL_DELAY_S) == 5


def test_once_no_job_has_run_for_a_while_every_missing_spare_starts_at_once(pool):
    """A notebook's next cell, or a new driver, finds the spares up; a script's
    next job, submitted at once, does not start beside a burst of them."""
    leased = _running_job_of_4(pool)
    pool.refill(1.0)  # a round while the job runs
    for sid in leased:
        pool.ledger.give_back("job", sid, now=1.0)
    assert _started_at(pool, 1.0 + PoolLedger.QUIET_S - 0.1) == 4, "spares burst out right after a job"
    assert _started_at(pool, 1.0 + PoolLedger.QUIET_S) == 8, "a quiet pool did not start the 4 it lacks at once"


def test_spares_start_one_at_a_time_and_none_while_a_process_is_starting(pool):
    _running_job_of_4(pool)
    pool.refill(0.0)
    counts = [_started_at(pool, PoolLedger.REFILL_DELAY_S + 0.25 * i) for i in range(4)]
    assert counts == [5, 5, 5, 5], "a second spare started beside one still starting"
    pool.up()
    assert _started_at(pool, PoolLedger.REFILL_DELAY_S + 1.0) == 6
    for i in range(3):
        pool.up()
        pool.refill(PoolLedger.REFILL_DELAY_S + 2.0 + i)
    assert pool.started["slots"] == 8, "the shape's target is the largest lease: 4 fresh beside the 4 leased"


def test_a_standby_coordinator_starts_neither_while_a_job_slot_is_starting_nor_within_the_refill_delay(pool):
    pool.ledger.settings = PoolSettings(idle_slots=0, idle_coordinators=1)
    pool.ledger.envs["env"] = {}
    pool.lease("job", A, 2)  # its slots are starting
    pool.refill(0.0)
    assert pool.started["coordinators"] == 0, "a coordinator started beside the job's starting slots"
    pool.up()
    pool.refill(PoolLedger.REFILL_DELAY_S - 0.1)
    assert pool.started["coordinators"] == 0, "a coordinator started beside the running job before the delay"
    pool.refill(PoolLedger.REFILL_DELAY_S)
    assert pool.started["coordinators"] == 1


def test_lost_slots_are_replaced_after_the_failover_all_together_even_while_others_start(pool):
    """The job that lost them takes spares and redeploys first; then as many start
    as were lost, without the refill delay; the shape's other missing spares come
    later, one at a time, so the boots do not crowd the next failover."""
    leased = _running_job_of_4(pool)
    pool.lease("other", A, 1, shape=Shape(options={"num_cpus": 0.25}, runtime_env={}))  # starting: the pool is booting
    pool.ledger.forget_slots(leased[:2], now=0.1)  # two task actors of the running job died (a node, say)
    assert _started_at(pool, 0.1 + PoolLedger.REPLACE_DELAY_S - 0.05) == 5, "a replacement started beside the failover"
    assert _started_at(pool, 0.1 + PoolLedger.REPLACE_DELAY_S) == 5 + 2, "the lost slots were not replaced together"
    assert _started_at(pool, 0.1 + PoolLedger.REPLACE_DELAY_S + 0.25) == 7, "more than the lost ones started at once"


def test_short_of_cpus_an_applications_idle_slots_retire_before_fresh_ones(pool):
    pool.ledger.settings = PoolSettings(idle_slots=1, idle_coordinators=0)
    mine = pool.lease("a-1", A, 1)
    fresh = pool._slot(SHAPE.key)
    pool.up()
    pool.ledger.give_back("a-1", mine[0], now=0.0)
    assert pool.refill(1.0, free=-0.1).retire_slots == mine
    assert fresh in pool.ledger.slots


def test_a_job_about_to_deploy_has_the_slots_it_lacks_started_beside_its_coordinator(pool):
    """On a cold pool the first job's processes boot together with its
    coordinator, not one round after the other; a warm pool starts nothing."""
    assert pool.ledger.expect(SHAPE, 4, A.id) == 4
    mine = pool.lease("a-1", A, 2)
    pool.up()
    for sid in mine:
        pool.ledger.give_back("a-1", sid, now=1.0)
    pool._slot(SHAPE.key)
    assert pool.ledger.expect(SHAPE, 4, A.id) == 1, "its application's idle slots and fresh ones cover the rest"
    assert pool.ledger.expect(SHAPE, 4, B.id) == 3, "another application's idle slots do not count for it"


def test_a_cluster_start_has_the_spares_a_first_job_takes_started_at_once_within_the_room_there_is(pool):
    pool.ledger.settings = PoolSettings(idle_slots=4, idle_coordinators=1)
    plan = pool.ledger.warm_up(SHAPE, "env", {}, now=0.0, free_cpus=CPUS)
    assert plan.new_slots == [SHAPE.key] * 4 and plan.new_coordinators == ["env"]
    pool._slot(SHAPE.key)
    assert len(pool.ledger.warm_up(SHAPE, "env", {}, now=0.0, free_cpus=CPUS).new_slots) == 3, "a fresh one not counted"
    assert len(pool.ledger.warm_up(SHAPE, "env", {}, now=0.0, free_cpus=1.0).new_slots) == 2, (
        "more than fit (0.5 CPU each)"
    )
    pool.up()
    assert _started_at(pool, 1.0) == 4, "the warmed shape is not kept at its target as one in use"
