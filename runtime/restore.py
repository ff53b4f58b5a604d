"""Where a job starts and restarts: the complete checkpoints and savepoints it may
restore from (the latest is used; a damaged one falls back to the one before),
and what each of the job's operators restores from one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from weir.runtime.deployment import OperatorRestore
from weir.runtime.errors import (
    CheckpointStorageError,
    CorruptCheckpointError,
    InvalidJobGraphError,
    NoRestorePointError,
)
from weir.runtime.failover import FallBack, RestorePoint, fall_back
from weir.runtime.graph import JobGraph
from weir.runtime.job_lifecycle import JobStatus
from weir.runtime.storage import CheckpointStorage, find_restore_point, handle_from_json, read_metadata

log = logging.getLogger("weir.jobmaster")


@dataclass
class StartingPoint:
    """Where a job master starts its job: the ``points`` it may restore from,
    oldest first; the id its next checkpoint takes (None: 1); or, for a run that
    had ended before its job master restarted, that end (``ended``: status and
    detail), and the job is not run again. A recovering job master also finds
    what its predecessor left unfinished: checkpoint folders that never completed
    (``incomplete``) and the files in the shared folder (``shared``), listed
    before any task of its own writes there."""

    points: list[RestorePoint]
    next_checkpoint_id: int | None = None
    ended: tuple[JobStatus, str] | None = None
    incomplete: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)


class RestorePoints:
    """The complete checkpoints and savepoints a job may restore from, oldest
    first, as (location, metadata): the latest is used; a damaged one falls back
    to the one before it."""

    def __init__(self, points: list[RestorePoint] | None = None) -> None:
        self.points = points or []

    @property
    def latest(self) -> dict[str, Any] | None:
        return self.points[-1][1] if self.points else None

    def completed(self, location: str, metadata: dict[str, Any]) -> None:
        self.points.append((location, metadata))

    def discarded(self, locations: list[str]) -> None:
        self.points = [p for p in self.points if p[0] not in locations]

    def fall_back(self, error: CorruptCheckpointError, job: str) -> FallBack:
        """The latest is damaged: drop it (see :func:`weir.runtime.failover.fall_back`)."""
        decision = fall_back(self.points, error, job)
        self.points = decision.restore_points
        if decision.restartable:
            log.warning(
                "job %s: %s; falling back to %s (records after it are processed again: "
                "sinks that committed the damaged checkpoint may see them twice)",
                job,
                error,
                self.points[-1][0],
            )
        return decision

    def plan(self, graph: JobGraph) -> dict[str, OperatorRestore]:
        """What each operator of ``graph`` restores from the latest (nothing: none)."""
        latest = self.latest
        return {} if latest is None else restore_plan(latest, graph, graph.execution.allow_non_restored_state)

    def coordinator_states(self) -> dict[str, Any]:
        latest = self.latest
        return {} if latest is None else latest.get("coordinators", {})


def starting_point(storage: CheckpointStorage, graph: JobGraph, recovering: bool) -> StartingPoint:
    """After a job master's death (``recovering``), the run's latest completed
    checkpoint (never a half-written one: those have no metadata), with new
    checkpoint ids after every folder there; else the savepoint the job was given."""
    if recovering:
        recovered = _recovered(storage, graph)
        if recovered.points or recovered.ended is not None:
            return recovered
    else:
        recovered = StartingPoint([])
    given = graph.execution.restore_from
    if given is not None:
        location = find_restore_point(given)
        recovered.points.append((location, read_metadata(location)))
        restore_plan(recovered.points[-1][1], graph, graph.execution.allow_non_restored_state)  # fail fast
    return recovered


def _recovered(storage: CheckpointStorage, graph: JobGraph) -> StartingPoint:
    result = storage.recorded_result()
    if result is not None:
        log.warning(
            "job %s had ended %s before its job master restarted; it is not run again", graph.name, result["status"]
        )
        return StartingPoint([], ended=(JobStatus(result["status"]), result["detail"]))
    if not storage.started():
        raise CheckpointStorageError(
            storage.root,
            "holds no trace of this run, which had started: is it the storage the job wrote to, reachable from "
            "this node? (the default local storage is not shared between nodes; use s3://, hdfs:// or a shared mount)",
        )
    folders = storage.checkpoint_ids(completed_only=False)
    done = storage.checkpoint_ids()
    start = StartingPoint(
        [],
        max(folders, default=0) + 1,
        incomplete=[storage.location(cid) for cid in folders if cid not in done],
        shared=storage.shared_files(),
    )
    for cid in done:
        location = storage.location(cid)
        try:
            start.points.append((location, read_metadata(location)))
        except CorruptCheckpointError as exc:
            log.warning("job %s: skipping damaged checkpoint %d: %s", graph.name, cid, exc)
    if start.points:
        log.warning("job %s: job master restarted; recovering from %s", graph.name, start.points[-1][0])
    elif done:
        raise NoRestorePointError(
            f"job '{graph.name}' cannot recover: every checkpoint in {storage.root} is damaged "
            "(see the warnings); not starting from scratch, which would silently drop its state"
        )
    return start


def restore_plan(
    metadata: dict[str, Any], graph: JobGraph, allow_non_restored_state: bool
) -> dict[str, OperatorRestore]:
    """Match a checkpoint's or savepoint's operator state to this job's operators by
    uid. Parallelism may differ (key groups move, list state splits evenly); max
    parallelism may not. State of a uid the job does not have is an error unless
    ``allow_non_restored_state``."""
    in_job = {op.uid: v for v in graph.vertices.values() for op in v.operators}
    plan: dict[str, OperatorRestore] = {}
    for uid, op in metadata["operators"].items():
        vertex = in_job.get(uid)
        if vertex is None:
            if op.get("has_state", True) and not allow_non_restored_state:
                raise InvalidJobGraphError(
                    f"the snapshot holds state of operator '{op['name']}' (uid '{uid}'), which this job does not have; "
                    "give that operator the same uid(), or drop its state with allow_non_restored_state=True"
                )
            continue
        if op["max_parallelism"] != vertex.max_parallelism:
            raise InvalidJobGraphError(
                f"operator '{op['name']}' (uid '{uid}') was snapshotted with max parallelism {op['max_parallelism']} "
                f"but has {vertex.max_parallelism} now; max parallelism fixes the key groups and cannot change"
            )
        handles = [handle_from_json(h) if h is not None else None for h in op["handles"]]
        plan[uid] = OperatorRestore(
            handles,
            op["fully_finished"],
            not op.get("operator_state", True),
            metadata.get("checkpoint_id") if metadata.get("kind", "checkpoint") == "checkpoint" else None,
        )
    _refuse_input_to_finished(plan, graph)
    return plan


def _refuse_input_to_finished(plan: dict[str, OperatorRestore], graph: JobGraph) -> None:
    """FLIP-147: a fully finished operator never runs again, so every operator
    feeding it must have fully finished too (a new or unfinished one in front of
    it would send it records)."""
    names = {op.uid: op.name for v in graph.vertices.values() for op in v.operators}
    for v in graph.vertices.values():
        for k, op in enumerate(v.operators):
            if not (op.uid in plan and plan[op.uid].fully_finished):
                continue
            feeding = (
                [v.operators[k - 1].uid]
                if k
                else [e.source_operator or graph.vertices[e.source].operators[-1].uid for e in v.inputs]
            )
            for uid in feeding:
                if not (uid in plan and plan[uid].fully_finished):
                    raise InvalidJobGraphError(
                        f"operator '{op.name}' (uid '{op.uid}') had fully finished in the snapshot, but operator "
                        f"'{names[uid]}' (uid '{uid}') in front of it {'had not' if uid in plan else 'is new and has not'}; "
                        "a fully finished operator gets no input again, so what feeds it must have finished too"
                    )
