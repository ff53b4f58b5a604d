"""Operator coordinators: per-operator logic that runs on the job master and talks
to the operator's subtasks with events, both ways. A source's split enumerator is
one (:mod:`weir.runtime.sources`).

A coordinator runs on the job master's loop thread, so it needs no locks. Every
(re)deployment starts it afresh from the state in the checkpoint the job restores
(or from nothing). Its state goes into every checkpoint, snapshotted before any
task is triggered.

The event valve (FLINK-16986) keeps that snapshot consistent with the subtasks'
snapshots of the same checkpoint N, whatever order the transport delivers in:

* before the tasks are triggered for N, every event the coordinator sent before
  its snapshot must have been handled by its subtask (acknowledged), so the
  subtask's snapshot includes it, as the coordinator's snapshot assumes;
* events the coordinator sends after its snapshot are held back for a subtask
  until that subtask has snapshotted N (or N was aborted), so the subtask's
  snapshot does not include what the coordinator's snapshot does not know of.

A subtask gets one event at a time, in the order they were sent (transports such
as threaded Ray actors may reorder calls). An event that cannot be delivered
fails its subtask over (the executor reports it as a task failure).
"""

from __future__ import annotations

import collections
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


class CoordinatorContext(Protocol):
    @property
    def parallelism(self) -> int: ...

    def send_event(self, subtask: int, event: Any) -> None:
        """Send ``event`` to the operator's subtask (through the valve)."""

    def call_async(
        self,
        call: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        period_s: float | None = None,
    ) -> None:
        """Run ``call`` off the job master's loop (it may block: a partition
        discovery asks a broker), then ``handler(result, error)`` on the loop, as
        the coordinator's other methods run. ``period_s``: again that long after
        each run ends, for as long as this coordinator lives (Flink's
        ``SplitEnumeratorContext#callAsync``)."""


class OperatorCoordinator(ABC):
    """Job-wide logic of one operator. ``start`` gets the state from the restored
    checkpoint's :meth:`snapshot_state`, or None on a fresh start."""

    @abstractmethod
    def start(self, context: CoordinatorContext, restored: Any | None) -> None: ...

    @abstractmethod
    def handle_event(self, subtask: int, event: Any) -> None:
        """An event the operator's ``subtask`` sent."""

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> Any:
        """The coordinator's state as of now; picklable."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        pass

    def subtask_reset(self, subtask: int) -> bool:
        """Region failover: ``subtask`` alone restarts from the latest completed
        checkpoint while the other subtasks go on, so take back what was sent to
        it after that checkpoint's snapshot. Return False if this coordinator
        cannot (the default): then the whole job restarts."""
        return False

    def close(self) -> None:
        pass


# Sends (subtask, operator uid, event id, event) to a subtask of the current attempt.
EventSender = Callable[[int, str, int, Any], None]


@dataclass(eq=False)
class AsyncCall:
    """A coordinator's call off the loop: due at ``at``, then every ``period_s``."""

    call: Callable[[], Any]
    handler: Callable[[Any, BaseException | None], None]
    period_s: float | None
    at: float = 0.0  # 0: at the next tick
    running: bool = False


@dataclass
class _Valve:
    """One subtask's side of the gateway."""

    queue: collections.deque[tuple[int, Any]] = field(default_factory=collections.deque)
    last_id: int = -1  # the last event queued for the subtask
    in_flight: int | None = None  # the event on its way, not yet acknowledged
    acked_up_to: int = -1  # every event up to this id was handled
    closed_for: set[int] = field(default_factory=set)  # checkpoints the subtask has not snapshotted yet
    boundary: int | None = None  # while closed, events after this id wait
    gone: bool = False  # the subtask exited: nothing more goes to it
    down: bool = False  # the subtask is being redeployed: events wait


class CoordinatorHolder:
    """Hosts one operator's coordinator for one deployment of the job, with a
    gateway per subtask. ``valve=False`` switches the FLINK-16986 protection off
    (for tests that show what it prevents)."""

    def __init__(
        self,
        uid: str,
        name: str,
        parallelism: int,
        coordinator: OperatorCoordinator,
        send: EventSender,
        valve: bool = True,
    ) -> None:
        self.uid = uid
        self.name = name
        self._parallelism = parallelism
        self.coordinator = coordinator
        self._send = send
        self._valve_on = valve
        self._valves = [_Valve() for _ in range(parallelism)]
        self._next_id = 0
        self._marks: dict[int, list[int]] = {}  # checkpoint -> per subtask: last event id sent before its snapshot
        self._calls: list[AsyncCall] = []

    # ---------------------------------------------------------------- CoordinatorContext
    @property
    def parallelism(self) -> int:
        return self._parallelism

    def send_event(self, subtask: int, event: Any) -> None:
        v = self._valves[subtask]
        if v.gone:
            return
        v.queue.append((self._next_id, event))
        v.last_id = self._next_id
        self._next_id += 1
        self._pump(subtask)

    def call_async(
        self,
        call: Callable[[], Any],
        handler: Callable[[Any, BaseException | None], None],
        period_s: float | None = None,
    ) -> None:
        if period_s is not None and period_s <= 0:
            raise ValueError(f"call_async: period_s must be positive, got {period_s}")
        self._calls.append(AsyncCall(call, handler, period_s))

    # ---------------------------------------------------------------- job master side
    def due_calls(self, now: float) -> list[AsyncCall]:
        """The async calls to start now; each is marked running until :meth:`call_done`."""
        due = [c for c in self._calls if not c.running and c.at <= now]
        for c in due:
            c.running = True
        return due

    def call_done(self, call: AsyncCall, result: Any, error: BaseException | None, now: float) -> None:
        """``call`` returned (or raised): its handler runs here, on the loop."""
        call.running = False
        if call.period_s is None:
            self._calls.remove(call)
        else:
            call.at = now + call.period_s
        call.handler(result, error)

    def start(self, restored: Any | None) -> None:
        self.coordinator.start(self, restored)

    def handle_event(self, subtask: int, event: Any) -> None:
        self.coordinator.handle_event(subtask, event)

    def snapshot(self, checkpoint_id: int, subtasks: set[int]) -> Any:
        """The coordinator's state for ``checkpoint_id``; from now on, events for the
        ``subtasks`` taking part wait until they snapshotted it."""
        state = self.coordinator.snapshot_state(checkpoint_id)
        if self._valve_on:
            self._marks[checkpoint_id] = [v.last_id for v in self._valves]
            for i in subtasks:
                v = self._valves[i]
                if not v.gone:
                    v.closed_for.add(checkpoint_id)
                    self._set_boundary(i)
        return state

    def settled(self, checkpoint_id: int) -> bool:
        """Every event sent before the snapshot of ``checkpoint_id`` was handled."""
        marks = self._marks.get(checkpoint_id)
        if marks is None:
            return True
        return all(v.gone or v.acked_up_to >= m for v, m in zip(self._valves, marks))

    def on_event_acknowledged(self, subtask: int, event_id: int) -> None:
        v = self._valves[subtask]
        if v.in_flight == event_id:
            v.in_flight = None
            v.acked_up_to = event_id
            self._pump(subtask)

    def on_subtask_checkpointed(self, subtask: int, checkpoint_id: int) -> None:
        """The subtask acknowledged (or declined) ``checkpoint_id``."""
        self._open(subtask, checkpoint_id)

    def on_checkpoint_ended(self, checkpoint_id: int, completed: bool) -> None:
        self._marks.pop(checkpoint_id, None)
        for i in range(self._parallelism):
            self._open(i, checkpoint_id)
        if completed:
            self.coordinator.notify_checkpoint_complete(checkpoint_id)

    def on_subtask_gone(self, subtask: int) -> None:
        v = self._valves[subtask]
        v.gone = True
        v.queue.clear()
        v.in_flight = None

    def reset_subtask(self, subtask: int) -> bool:
        """``subtask`` failed and restarts alone from the latest completed
        checkpoint: events to its dead attempt are dropped (the coordinator takes
        back what they carried) and new ones wait for :meth:`subtask_running`.
        False: the coordinator cannot."""
        self._valves[subtask] = _Valve(down=True)
        return self.coordinator.subtask_reset(subtask)

    def subtask_running(self, subtask: int) -> None:
        self._valves[subtask].down = False
        self._pump(subtask)

    def close(self) -> None:
        self.coordinator.close()

    # ---------------------------------------------------------------- internals
    def _open(self, subtask: int, checkpoint_id: int) -> None:
        self._valves[subtask].closed_for.discard(checkpoint_id)
        self._set_boundary(subtask)
        self._pump(subtask)

    def _set_boundary(self, subtask: int) -> None:
        """The cut-off is the oldest checkpoint the subtask has not snapshotted:
        events sent before a later checkpoint's snapshot go out once the older one
        is snapshotted, since that later checkpoint waits for them (holding them
        until the later one would deadlock both: FLINK-16986 with two in flight)."""
        v = self._valves[subtask]
        v.boundary = self._marks[min(v.closed_for)][subtask] if v.closed_for else None

    def _pump(self, subtask: int) -> None:
        v = self._valves[subtask]
        if v.gone or v.down or v.in_flight is not None or not v.queue:
            return
        event_id, event = v.queue[0]
        if v.boundary is not None and event_id > v.boundary:
            return  # held back by the valve
        v.queue.popleft()
        v.in_flight = event_id
        self._send(subtask, self.uid, event_id, event)
