"""Barrier alignment, as a state machine (Flink's SingleCheckpointBarrierHandler).

The handler owns the live input channels and the set of channels held back. Each
event method asks the current state object for the next one; an event that is
illegal in the current state raises :class:`BarrierProtocolError` and leaves the
state as it was. What the task must do comes back as a list of actions:
``Snapshot(barrier, alignment_ms)`` when aligned (how long since its first barrier
arrived: the alignment time Flink's checkpoint statistics show per subtask),
``Abort(checkpoint_id, reason)`` when a pending checkpoint is given up. Exactly-once holds a channel back after its barrier;
at-least-once never holds anything back but still snapshots once every live
channel delivered the barrier.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from weir.runtime.errors import CheckpointFailureReason, WeirError
from weir.runtime.events import CheckpointBarrier


class BarrierProtocolError(WeirError):
    pass


@dataclass(frozen=True)
class Snapshot:
    barrier: CheckpointBarrier
    alignment_ms: int = 0


@dataclass(frozen=True)
class Abort:
    checkpoint_id: int
    reason: CheckpointFailureReason


Action = Snapshot | Abort


class _State:
    def barrier(self, h: "BarrierHandler", channel: int, barrier: CheckpointBarrier) -> "_State":
        raise NotImplementedError

    def cancel(self, h: "BarrierHandler", checkpoint_id: int) -> "_State":
        raise NotImplementedError

    def channel_closed(self, h: "BarrierHandler") -> "_State":
        return self


class WaitingForFirstBarrier(_State):
    def barrier(self, h: "BarrierHandler", channel: int, barrier: CheckpointBarrier) -> _State:
        if barrier.checkpoint_id <= h.last_checkpoint_id:
            return self  # late barrier of a checkpoint already done or cancelled here
        return CollectingBarriers(barrier, frozenset(), h.clock()).barrier(h, channel, barrier)

    def cancel(self, h: "BarrierHandler", checkpoint_id: int) -> _State:
        h.last_checkpoint_id = max(h.last_checkpoint_id, checkpoint_id)
        return self


@dataclass(frozen=True)
class CollectingBarriers(_State):
    pending: CheckpointBarrier
    received: frozenset[int]
    first_at: float  # when its first barrier arrived (the handler's clock, seconds)

    def barrier(self, h: "BarrierHandler", channel: int, barrier: CheckpointBarrier) -> _State:
        cid = barrier.checkpoint_id
        if cid < self.pending.checkpoint_id:
            return self
        if cid > self.pending.checkpoint_id:
            h.abort(self.pending.checkpoint_id, CheckpointFailureReason.DECLINED_SUBSUMED)
            return WaitingForFirstBarrier().barrier(h, channel, barrier)
        if channel in self.received:
            raise BarrierProtocolError(f"barrier {cid} arrived twice on channel {channel}")
        if channel not in h.live_channels:
            raise BarrierProtocolError(f"barrier {cid} on channel {channel}, which has ended")
        h.hold_back(channel)
        return CollectingBarriers(self.pending, self.received | {channel}, self.first_at).channel_closed(h)

    def cancel(self, h: "BarrierHandler", checkpoint_id: int) -> _State:
        if checkpoint_id < self.pending.checkpoint_id:
            return self
        h.abort(self.pending.checkpoint_id, CheckpointFailureReason.DECLINED_CANCELLED)
        return WaitingForFirstBarrier().cancel(h, checkpoint_id)

    def channel_closed(self, h: "BarrierHandler") -> _State:
        if h.live_channels <= self.received:
            h.release(self.pending, round((h.clock() - self.first_at) * 1000))
            return WaitingForFirstBarrier()
        return self


class BarrierHandler:
    """Alignment for one task. Not thread-safe: the task's loop thread drives it."""

    def __init__(self, channels: int, exactly_once: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.live_channels: set[int] = set(range(channels))
        self.clock = clock
        self.blocked: set[int] = set()
        self.last_checkpoint_id = 0
        self._exactly_once = exactly_once
        self._state: _State = WaitingForFirstBarrier()
        self._actions: list[Action] = []

    @property
    def state(self) -> _State:
        return self._state

    @property
    def pending_checkpoint(self) -> int | None:
        s = self._state
        return s.pending.checkpoint_id if isinstance(s, CollectingBarriers) else None

    def on_barrier(self, channel: int, barrier: CheckpointBarrier) -> list[Action]:
        return self._step(lambda s: s.barrier(self, channel, barrier))

    def on_cancel(self, checkpoint_id: int) -> list[Action]:
        return self._step(lambda s: s.cancel(self, checkpoint_id))

    def on_end_of_partition(self, channel: int) -> list[Action]:
        """The channel's producer exited: aligned for pending and later checkpoints."""

        def step(s: _State) -> _State:
            if channel not in self.live_channels:
                raise BarrierProtocolError(f"channel {channel} ended twice")
            self.live_channels.discard(channel)
            self.blocked.discard(channel)
            return s.channel_closed(self)

        return self._step(step)

    def _step(self, event) -> list[Action]:  # type: ignore[no-untyped-def]
        saved = (set(self.live_channels), set(self.blocked), self.last_checkpoint_id)
        self._actions = []
        try:
            self._state = event(self._state)
        except BarrierProtocolError:
            self.live_channels, self.blocked, self.last_checkpoint_id = saved
            raise
        actions, self._actions = self._actions, []
        return actions

    # Called by the states.
    def hold_back(self, channel: int) -> None:
        if self._exactly_once:
            self.blocked.add(channel)

    def release(self, barrier: CheckpointBarrier, alignment_ms: int) -> None:
        self.blocked.clear()
        self.last_checkpoint_id = barrier.checkpoint_id
        self._actions.append(Snapshot(barrier, alignment_ms))

    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason) -> None:
        self.blocked.clear()
        self.last_checkpoint_id = max(self.last_checkpoint_id, checkpoint_id)
        self._actions.append(Abort(checkpoint_id, reason))
