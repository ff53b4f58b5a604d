"""Barrier alignment as a state machine, driven by hand and by seeded random interleavings."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.runtime.barriers import (
    Abort,
    BarrierHandler,
    BarrierProtocolError,
    CollectingBarriers,
    Snapshot,
    WaitingForFirstBarrier,
)
from weir.runtime.errors import CheckpointFailureReason
from weir.runtime.events import CheckpointBarrier


def FROZEN() -> float:
    """A clock that stands still: every alignment takes 0 ms."""
    return 0.0


def b(cid: int) -> CheckpointBarrier:
    return CheckpointBarrier(cid, 0)


def test_single_channel_snapshots_at_once():
    h = BarrierHandler(1, clock=FROZEN)
    assert h.on_barrier(0, b(1)) == [Snapshot(b(1))]
    assert h.blocked == set()


def test_two_inputs_hold_back_the_first_channel_until_aligned():
    h = BarrierHandler(2, clock=FROZEN)
    assert h.on_barrier(0, b(1)) == []
    assert h.blocked == {0}
    assert isinstance(h.state, CollectingBarriers)
    assert h.on_barrier(1, b(1)) == [Snapshot(b(1))]
    assert h.blocked == set()
    assert isinstance(h.state, WaitingForFirstBarrier)


def test_newer_barrier_subsumes_the_pending_one():
    h = BarrierHandler(3, clock=FROZEN)
    h.on_barrier(0, b(1))
    actions = h.on_barrier(1, b(2))
    assert actions == [Abort(1, CheckpointFailureReason.DECLINED_SUBSUMED)]
    assert h.pending_checkpoint == 2
    assert h.blocked == {1}
    assert h.on_barrier(0, b(1)) == []  # late barrier of the aborted checkpoint is ignored
    h.on_barrier(0, b(2))
    assert h.on_barrier(2, b(2)) == [Snapshot(b(2))]


def test_cancel_marker_aborts_and_releases():
    h = BarrierHandler(2, clock=FROZEN)
    h.on_barrier(0, b(1))
    assert h.on_cancel(1) == [Abort(1, CheckpointFailureReason.DECLINED_CANCELLED)]
    assert h.blocked == set()
    assert h.on_barrier(1, b(1)) == []  # the cancelled checkpoint does not start again


def test_cancel_before_any_barrier_skips_that_checkpoint():
    h = BarrierHandler(2, clock=FROZEN)
    assert h.on_cancel(1) == []
    assert h.on_barrier(0, b(1)) == []
    assert h.blocked == set()
    h.on_barrier(0, b(2))
    assert h.on_barrier(1, b(2)) == [Snapshot(b(2))]


def test_end_of_partition_aligns_a_pending_checkpoint():
    h = BarrierHandler(2, clock=FROZEN)
    h.on_barrier(0, b(1))
    assert h.on_end_of_partition(1) == [Snapshot(b(1))]
    assert h.on_barrier(0, b(2)) == [Snapshot(b(2))]  # and every later one


def test_barrier_twice_on_a_channel_is_illegal_and_changes_nothing():
    h = BarrierHandler(2, clock=FROZEN)
    h.on_barrier(0, b(1))
    before = (h.state, set(h.blocked), set(h.live_channels))
    with pytest.raises(BarrierProtocolError, match="twice"):
        h.on_barrier(0, b(1))
    assert (h.state, h.blocked, h.live_channels) == before


def test_end_of_partition_twice_is_illegal():
    h = BarrierHandler(2, clock=FROZEN)
    h.on_end_of_partition(1)
    with pytest.raises(BarrierProtocolError):
        h.on_end_of_partition(1)
    assert h.live_channels == {0}


def test_at_least_once_never_holds_back():
    h = BarrierHandler(2, exactly_once=False, clock=FROZEN)
    assert h.on_barrier(0, b(1)) == []
    assert h.blocked == set()
    assert h.on_barrier(1, b(1)) == [Snapshot(b(1))]


def _drive(channels: int, checkpoints: int, ending: set[int], seed: int, exactly_once: bool = True) -> list:
    """Each channel carries barriers 1..checkpoints in order (channels in ``ending``
    end with EndOfPartition after a random number of them); deliveries interleave at
    random, and a held-back channel delivers nothing until released."""
    rng = random.Random(seed)
    queues = []
    for ch in range(channels):
        if ch in ending:
            cut = rng.randint(0, checkpoints)
            queues.append([("b", i) for i in range(1, cut + 1)] + [("eop", None)])
        else:
            queues.append([("b", i) for i in range(1, checkpoints + 1)])
    h = BarrierHandler(channels, exactly_once, clock=FROZEN)
    actions = []
    while True:
        ready = [ch for ch in range(channels) if queues[ch] and ch not in h.blocked]
        if not ready:
            break
        ch = rng.choice(ready)
        kind, cid = queues[ch].pop(0)
        actions += h.on_barrier(ch, b(cid)) if kind == "b" else h.on_end_of_partition(ch)
    assert not any(queues), f"seed {seed}: stuck with {queues}, blocked {h.blocked}"
    return actions


@settings(max_examples=300, deadline=None)
@given(
    channels=st.integers(1, 5),
    checkpoints=st.integers(1, 6),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_random_interleavings_snapshot_every_checkpoint_once_in_order(channels, checkpoints, seed, data):
    ending = data.draw(st.sets(st.integers(0, channels - 1), max_size=channels - 1))
    actions = _drive(channels, checkpoints, ending, seed)
    assert [a.barrier.checkpoint_id for a in actions] == list(range(1, checkpoints + 1))
    assert all(isinstance(a, Snapshot) for a in actions)


def test_the_alignment_time_runs_from_the_first_barrier_to_the_last():
    """What each acknowledgement reports as the subtask's alignment (the UI's
    and ``checkpoints()``' ``alignment_ms``): a channel that is blocked early waits."""
    now = [10.0]
    h = BarrierHandler(3, clock=lambda: now[0])
    assert h.on_barrier(1, b(1)) == []
    now[0] = 10.2
    assert h.on_barrier(0, b(1)) == []
    now[0] = 10.75
    assert h.on_barrier(2, b(1)) == [Snapshot(b(1), alignment_ms=750)]
    now[0] = 11.0  # the next checkpoint starts its own count
    h.on_barrier(0, b(2))
    assert h.on_end_of_partition(1) == []
    now[0] = 11.04
    assert h.on_end_of_partition(2) == [Snapshot(b(2), alignment_ms=40)]
