"""When the slot pool starts spare processes, with Ray and the clock stubbed out
so each rule is checked on its own: a shape short of idle slots waits
REFILL_DELAY_S (a short job gives its slots back before then); no spare starts
while a pool process is still starting; spares start one at a time; a lost
slot is replaced at once, every missing one together."""

from __future__ import annotations

import itertools
import types

import pytest

import actors.pool as pool_module
from actors.pool import PoolSettings, Shape, SlotPool, _Coordinator, _Slot

SHAPE = Shape(options={"num_cpus": 0.5}, runtime_env={})


class _Actor:
    def __init__(self, n: int) -> None:
        self._actor_id = types.SimpleNamespace(hex=lambda: f"actor-{n}")


@pytest.fixture
def pool(monkeypatch):
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(pool_module, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(pool_module, "ray", types.SimpleNamespace(
        available_resources=lambda: {"CPU": 16.0},
        wait=lambda refs, **_: ([], refs),  # nothing comes up unless a test says so
        kill=lambda *a, **k: None,
    ))
    monkeypatch.setattr(SlotPool, "_refill_loop", lambda self: None)  # the test calls _refill itself
    numbers = itertools.count()

    def new_slot(self, shape):
        slot = _Slot(_Actor(next(numbers)), shape.key, ready=None)
        self._slots[slot.actor._actor_id.hex()] = slot
        self.created["slots"] += 1
        return slot

    def new_coordinator(self, env_key):
        c = _Coordinator(_Actor(next(numbers)), env_key, ready=None)
        self._coordinators[c.actor._actor_id.hex()] = c
        self.created["coordinators"] += 1
        return c

    monkeypatch.setattr(SlotPool, "_new_slot", new_slot)
    monkeypatch.setattr(SlotPool, "_new_coordinator", new_coordinator)
    p = SlotPool(PoolSettings(idle_slots=0, idle_coordinators=0))
    p.clock = clock
    return p


def _up(p: SlotPool) -> None:
    """Every process the pool started has come up."""
    for s in p._slots.values():
        s.node_id = s.node_id or "node-1"
    for c in p._coordinators.values():
        c.up = True


def _at(p: SlotPool, t: float) -> int:
    """Run one refill round at time t; how many slots the pool has started so far."""
    p.clock.now = t
    p._refill()
    return p.created["slots"]


def _running_job_of_4(p: SlotPool) -> list:
    leased = p.lease("job", SHAPE, 4)  # nothing idle: 4 new slots, the job's own
    _up(p)
    return leased


def test_a_short_shape_waits_the_refill_delay_before_starting_a_spare(pool):
    _running_job_of_4(pool)
    assert _at(pool, 0.0) == 4
    assert _at(pool, SlotPool.REFILL_DELAY_S - 0.1) == 4, "a spare started before the delay"
    assert _at(pool, SlotPool.REFILL_DELAY_S) == 5


def test_spares_start_one_at_a_time_and_none_while_a_process_is_starting(pool):
    _running_job_of_4(pool)
    _at(pool, 0.0)
    counts = [_at(pool, SlotPool.REFILL_DELAY_S + 0.25 * i) for i in range(4)]
    assert counts == [5, 5, 5, 5], "a second spare started beside one still starting"
    _up(pool)
    assert _at(pool, SlotPool.REFILL_DELAY_S + 1.0) == 6
    for i in range(3):
        _up(pool)
        _at(pool, SlotPool.REFILL_DELAY_S + 2.0 + i)
    assert pool.created["slots"] == 8, "the shape's target is the largest lease: 4 idle beside the 4 leased"


def test_no_idle_coordinator_starts_while_a_job_slot_is_starting(pool):
    pool._envs["env"] = {}
    pool.settings = PoolSettings(idle_slots=0, idle_coordinators=1)
    pool.lease("job", SHAPE, 2)  # its slots are starting
    _at(pool, 0.0)
    assert pool.created["coordinators"] == 0, "a coordinator started beside the job's starting slots"
    _up(pool)
    _at(pool, 0.25)
    assert pool.created["coordinators"] == 1


def test_a_lost_slot_is_replaced_at_once_with_every_missing_spare_even_while_others_start(pool):
    leased = _running_job_of_4(pool)
    _at(pool, 0.0)
    pool.lease("other", Shape(options={"num_cpus": 0.25}, runtime_env={}), 1)  # starting: the pool is booting
    pool.forget(leased[:1])  # a task actor of the running job died
    assert _at(pool, 0.1) == 5 + 4, "after a loss every missing slot starts at once, without the delay"
