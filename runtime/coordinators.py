"""The operator coordinators of one deployment of a job, as the job master keeps
them: started from the restored checkpoint, fed the tasks' events, snapshotted
before the tasks, told how each checkpoint ended, reset or closed by a failover.

A call into a coordinator's code that raises does not unwind into the job master:
it is reported through ``fail``, which the job master handles as a letter once the
current one is done (a failing coordinator restarts the job as a failing task would).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
from typing import Any, Callable, Collection

from weir.runtime.checkpointing import TaskKey
from weir.runtime.coordination import AsyncCall, CoordinatorHolder
from weir.runtime.errors import CorruptCheckpointError, UserFunctionError
from weir.runtime.events import CheckpointBarrier
from weir.runtime.failover import coordinator_resets
from weir.runtime.graph import JobGraph
from weir.runtime.letters import (
    CoordinatorCallDone,
    EventAcknowledged,
    EventFromOperator,
    MasterLetter,
    OperatorEvent,
    TaskLetter,
    TriggerCheckpoint,
)
from weir.runtime.off_loop import Work
from weir.runtime.storage import handle_from_json, pickle_state, read_state

log = logging.getLogger("weir.jobmaster")

FAILED = object()  # what a call into a coordinator that raised returns


class OperatorCoordinators:
    """``send`` hands a letter to a task; ``post`` a letter to the job master's
    mailbox (from any thread); ``fail`` reports a coordinator's failure; ``io``
    runs coordinators' async calls off the loop (default: two threads).
    ``valve=False`` switches off the FLINK-16986 protection (tests only)."""

    def __init__(
        self,
        job: str,
        send: Callable[[TaskKey, TaskLetter], None],
        post: Callable[[MasterLetter], None],
        fail: Callable[[BaseException], None],
        valve: bool = True,
        io: Callable[[Work], None] | None = None,
    ) -> None:
        self._job, self._send, self._post, self._fail, self._valve = job, send, post, fail, valve
        self._io = io or self._in_pool
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._holders: dict[str, tuple[str, CoordinatorHolder]] = {}  # operator uid -> (vertex id, holder)
        self._held: dict[
            int, list[tuple[TaskKey, TriggerCheckpoint]]
        ] = {}  # a checkpoint's triggers, until events settle

    # ------------------------------------------------------------ lifecycle
    def start(
        self, graph: JobGraph, saved: dict[str, Any], region: frozenset[TaskKey] | None = None
    ) -> CorruptCheckpointError | None:
        """Fresh coordinators from their ``saved`` state: all of them for a new
        deployment, or those whose every subtask is in a redeployed ``region``
        (and the region's subtasks of the others run again). Returns the error
        of a damaged state, and starts nothing more."""
        if region is None:
            self.close()
        for v in graph.vertices.values():
            if region is not None and any((v.id, i) not in region for i in range(v.parallelism)):
                continue
            for spec in (s for s in v.operators if s.make_coordinator is not None):
                try:
                    state = read_state(handle_from_json(saved[spec.uid])) if spec.uid in saved else None
                except CorruptCheckpointError as exc:
                    return exc
                assert spec.make_coordinator is not None
                holder = CoordinatorHolder(
                    spec.uid, spec.name, v.parallelism, spec.make_coordinator(), self._sender(v.id), self._valve
                )
                self._holders[spec.uid] = (v.id, holder)
                self._call(holder, "start", holder.start, state)
        if region is not None:
            for vid, holder in self._holders.values():
                for i in (i for i in range(holder.parallelism) if (vid, i) in region):
                    holder.subtask_running(i)
        return None

    def _sender(self, vertex_id: str) -> Callable[[int, str, int, Any], None]:
        def send(subtask: int, uid: str, event_id: int, event: Any) -> None:
            self._send((vertex_id, subtask), OperatorEvent(uid, event_id, event))

        return send

    def close(self) -> None:
        holders, self._holders = self._holders, {}
        self._held.clear()
        for _, holder in holders.values():
            _close(holder)

    def shutdown(self) -> None:
        """The job has ended: close them, and leave calls blocked elsewhere (on a broker) to end on their own."""
        self.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def reset(self, region: frozenset[TaskKey]) -> bool:
        """A failed-over ``region`` restarts alone: close the coordinators of its
        operators whose every subtask is in it, reset the others' subtasks in it.
        False: a coordinator cannot reset (or failed to), so the whole job must restart."""
        plan = coordinator_resets(region, {uid: (vid, h.parallelism) for uid, (vid, h) in self._holders.items()})
        for uid in plan.close:
            _close(self._holders.pop(uid)[1])
        return all(
            self._call(self._holders[uid][1], "subtask_reset", self._holders[uid][1].reset_subtask, i) is True
            for uid, subtasks in plan.reset.items()
            for i in subtasks
        )

    # ------------------------------------------------------------ letters and ticks
    def on_event(self, letter: EventFromOperator) -> None:
        if letter.operator_uid in self._holders:
            holder = self._holders[letter.operator_uid][1]
            self._call(holder, "handle_event", holder.handle_event, letter.task[1], letter.event)

    def on_event_acknowledged(self, letter: EventAcknowledged) -> None:
        if letter.operator_uid in self._holders:
            self._holders[letter.operator_uid][1].on_event_acknowledged(letter.task[1], letter.event_id)
        self.release()

    def on_call_done(self, letter: CoordinatorCallDone, now: float) -> None:
        if any(holder is letter.holder for _, holder in self._holders.values()):  # else: from a closed one
            self._call(
                letter.holder, "async call", letter.holder.call_done, letter.call, letter.result, letter.error, now
            )

    def run_due_calls(self, now: float) -> None:
        for _, holder in list(self._holders.values()):
            for call in holder.due_calls(now):
                self._io(functools.partial(self._run_async_call, holder, call))

    def _run_async_call(self, holder: CoordinatorHolder, call: AsyncCall) -> None:
        """Off the loop: a coordinator's call; its end goes back to the loop as a letter."""
        try:
            done = CoordinatorCallDone(holder, call, call.call(), None)
        except Exception as exc:
            done = CoordinatorCallDone(holder, call, None, exc)
        self._post(done)

    def _in_pool(self, work: Work) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix=f"coordinator-{self._job}")
        self._pool.submit(work)

    # ------------------------------------------------------------ checkpoints
    def snapshot(self, checkpoint_id: int, to_ack: Collection[TaskKey]) -> dict[str, bytes] | None:
        """Every coordinator's state for ``checkpoint_id``, taken before any task's;
        None: one failed (the failure is reported)."""
        states = {}
        for vid, holder in self._holders.values():
            subtasks = {i for v, i in to_ack if v == vid}
            state = self._call(holder, "snapshot_state", holder.snapshot, checkpoint_id, subtasks)
            if state is FAILED:
                return None
            states[holder.uid] = pickle_state(state, f"coordinator of '{holder.name}'")
        return states

    def trigger(self, barrier: CheckpointBarrier, triggers: list[tuple[TaskKey, TriggerCheckpoint]]) -> None:
        """Send a checkpoint's triggers once every event its coordinators sent
        before their snapshot was handled (FLINK-16986)."""
        self._held[barrier.checkpoint_id] = triggers
        self.release()

    def release(self) -> None:
        for cid in sorted(self._held):
            if all(holder.settled(cid) for _, holder in self._holders.values()):
                for key, letter in self._held.pop(cid):
                    self._send(key, letter)

    def subtask_checkpointed(self, task: TaskKey, checkpoint_id: int) -> None:
        for vid, holder in self._holders.values():
            if vid == task[0]:
                holder.on_subtask_checkpointed(task[1], checkpoint_id)

    def subtask_gone(self, task: TaskKey) -> None:
        for vid, holder in self._holders.values():
            if vid == task[0]:
                holder.on_subtask_gone(task[1])
        self.release()

    def checkpoint_ended(self, checkpoint_id: int, committed: bool) -> None:
        """``checkpoint_id`` completed or was aborted; ``committed``: it completed
        and its side effects may be committed, so coordinators hear of it."""
        self._held.pop(checkpoint_id, None)
        for _, holder in self._holders.values():
            self._call(holder, "notify_checkpoint_complete", holder.on_checkpoint_ended, checkpoint_id, committed)

    # ------------------------------------------------------------ user code
    def _call(self, holder: CoordinatorHolder, what: str, call: Callable[..., Any], *args: Any) -> Any:
        """A call into a coordinator's code: its failure is reported, not raised (and it returns FAILED)."""
        try:
            return call(*args)
        except Exception as exc:
            self._fail(UserFunctionError(holder.name, f"coordinator {what}", exc))
            return FAILED


def _close(holder: CoordinatorHolder) -> None:
    try:
        holder.close()
    except Exception:
        log.exception("closing the coordinator of %s failed", holder.name)
