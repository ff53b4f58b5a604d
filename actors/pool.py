"""The slot pool: task actors and job coordinators running before a job needs them.

Starting a Ray actor starts a worker process, imports Ray, pyarrow and weir, and on
a small machine that takes seconds. So weir starts them ahead of time. One pool per
Ray cluster, a named actor (``weir-pool`` in the ``weir`` namespace) pinned to the
head node and created by the first job submitted (or ``weir pool start``), keeps:

- idle **slots**, task actors whose process is up, per *shape*: the Ray options a
  task asks for (CPUs, GPUs, memory, custom resources, placement, concurrency)
  plus the submitter's runtime env (its ``working_dir``, ``pip``, env vars);
- idle **job coordinators**, per runtime env;
- the **registry** of jobs by name (``weir list``, ``RayJobClient.attach``).

A background thread tops each shape seen up to its idle target and retires idle
slots beyond it after ``idle_timeout_s``.

A slot's life: idle → leased to one job, where it runs that job's tasks across
attempts and rescales → given back when the job ends: *reset* (its task object,
the Python modules the job imported from outside site-packages and the standard
library, and the job's fault-injection settings are dropped) and idle again, or
killed when its task did not end cleanly (killed, crashed, stuck after cancel) or
when reuse is off (``WEIR_POOL_REUSE=0``). What a reused process still keeps is
listed in docs/operations.md ("What a reused process keeps").

Ownership: slots and coordinators are this actor's children, so they outlive the
driver that submitted a job (``weir run``, ``ray job submit``) and a coordinator
that Ray restarts finds here which job it ran. The pool lives on the head node:
losing it is losing the cluster's control plane, and its children go with it.

Threading: a threaded actor; one lock guards the tables, and no Ray call waits
while holding it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass
from typing import Any

import ray

from actors.cluster import NAMESPACE, actor_runtime_env, ensure_ray

POOL_NAME = "weir-pool"
log = logging.getLogger("weir.pool")
COORDINATOR_RESTARTS = 5  # Ray restarts a dead job coordinator this often; it recovers from storage


@dataclass(frozen=True)
class PoolSettings:
    """Read from the environment of the process that creates the pool."""

    idle_slots: int = 4  # idle task actors kept per shape in use
    idle_coordinators: int = 1  # idle job coordinators kept per runtime env
    # Idle slots beyond the target leave after this; a shape no job leased for 6x
    # this long keeps none. Idle slots hold their CPU share, which Spark or Ray
    # Data on the same cluster may be waiting for.
    idle_timeout_s: float = 60.0
    reuse: bool = True  # a job's slots serve later jobs (reset) instead of leaving

    @staticmethod
    def from_env() -> "PoolSettings":
        env = os.environ
        return PoolSettings(
            idle_slots=int(env.get("WEIR_POOL_IDLE_SLOTS", PoolSettings.idle_slots)),
            idle_coordinators=int(env.get("WEIR_POOL_IDLE_COORDINATORS", PoolSettings.idle_coordinators)),
            idle_timeout_s=float(env.get("WEIR_POOL_IDLE_TIMEOUT_S", PoolSettings.idle_timeout_s)),
            reuse=env.get("WEIR_POOL_REUSE", "1") not in ("0", "false", "no"),
        )


@dataclass(frozen=True)
class Shape:
    """What a task actor is created with: Ray options and a runtime env."""

    options: dict[str, Any]
    runtime_env: dict[str, Any]

    @property
    def key(self) -> str:
        return json.dumps([self.options, self.runtime_env], sort_keys=True, default=str)

    @property
    def cpus(self) -> float:
        return float(self.options.get("num_cpus", 1))


@dataclass
class JobAssignment:
    """What a job coordinator runs; kept by the pool so that a coordinator Ray
    restarted can pick its job up again."""

    graph: Any  # runtime.graph.JobGraph
    linger_s: float
    faults: dict[str, str]  # WEIR_FAULT* of the submitter (weir's own failure tests)
    incarnation: int = 0  # how often Ray restarted this job's coordinator
    # Its coordinator accepted it (``start`` returned). Until then a restarted
    # coordinator must not recover it: the ``start`` call is still on its way
    # (Ray delivers it to the new process, or the pool takes another coordinator).
    started: bool = False


@dataclass
class _Slot:
    actor: Any
    shape: str
    ready: Any  # ref of actor.ready(): the node id once the process is up
    node_id: str = ""
    job: str | None = None
    idle_since: float = 0.0  # when a job gave it back (0: it never ran a task)


@dataclass
class _Coordinator:
    actor: Any
    env: str
    ready: Any
    job: str | None = None  # the job it runs now
    retiring: bool = False  # Ray restarted it: it takes no new job
    up: bool = False  # its process has started


# Modules a job imports from these folders stay loaded when its process is reset
# (Ray, numpy and the like: many C extensions cannot be loaded twice).
_KEPT_PATHS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})


class JobScope:
    """What one job leaves in a reused process, and its removal: the environment
    variables the job set (weir's failure injection) and the modules it imported
    from outside the standard library and site-packages, so that a user's edited
    module is imported afresh by the next job."""

    def __init__(self) -> None:
        self._own_modules = set(sys.modules)  # what the process loaded before any job
        self._env: set[str] = set()

    def enter(self, env: dict[str, str]) -> None:
        os.environ.update(env)
        self._env |= set(env)

    def leave(self) -> int:
        """Returns how many modules were dropped."""
        for name in self._env:
            os.environ.pop(name, None)
        self._env = set()
        dropped = [
            name for name, module in list(sys.modules.items())
            if name not in self._own_modules and not str(getattr(module, "__file__", None) or "").startswith(_KEPT_PATHS)
        ]
        for name in dropped:
            del sys.modules[name]
        return len(dropped)


# A cancelled task has this long to return before its slot is killed instead of
# reused (a user function that does not return, a source blocked on input): in a
# failover, and when a restarted coordinator takes its job's slots back.
CANCEL_GRACE_S = 3.0


def _id(actor: Any) -> str:
    return actor._actor_id.hex()


class SlotPool:
    REFILL_EVERY_S = 0.25
    CPU_RESERVE = 1.0
    # A shape is refilled once it has been short of idle slots this long (at once
    # when a slot was lost): a short job's slots come back when it ends, and a
    # process started meanwhile would compete with the job for CPU (on 2 cores,
    # 2 s let half of the 2-second jobs of bench.cost at p=4 pay 2 boots: 2-4x
    # their CPU).
    REFILL_DELAY_S = 5.0

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._shapes: dict[str, Shape] = {}
        self._short_since: dict[str, float] = {}  # shape key -> when it fell short of idle slots
        self._leased_at: dict[str, float] = {}  # shape key -> its latest lease
        self._largest_lease: dict[str, int] = {}  # shape key -> most slots one lease took lately
        self._refill_now: set[str] = set()  # shapes that lost slots: refill without the delay
        self._scarce_until = 0.0  # idle slots were retired to free CPU: start none before this
        self._slots: dict[str, _Slot] = {}
        self._envs: dict[str, dict[str, Any]] = {}
        self._coordinators: dict[str, _Coordinator] = {}
        self._jobs: dict[str, tuple[str, JobAssignment]] = {}  # job name -> (coordinator id, assignment)
        self.created = {"slots": 0, "coordinators": 0}
        threading.Thread(target=self._refill_loop, name="refill", daemon=True).start()

    # ------------------------------------------------------------ slots
    def lease(self, job: str, shape: Shape, count: int) -> list[Any]:
        """``count`` slots of ``shape`` for ``job``, at once: idle started ones first
        (spread over nodes round-robin), then idle ones still starting, then new
        ones. Those not started yet may wait for room on the cluster: the job's
        gateway waits for them (with its deadline, and gives up on a cancel)."""
        with self._lock:
            self._shapes.setdefault(shape.key, shape)
            if time.monotonic() - self._leased_at.get(shape.key, 0.0) > 6 * self.settings.idle_timeout_s:
                self._largest_lease[shape.key] = 0
            self._leased_at[shape.key] = time.monotonic()
            self._largest_lease[shape.key] = max(count, self._largest_lease.get(shape.key, 0))
            # Slots given back last go out first (warm, and the rest can retire).
            idle = sorted((s for s in self._slots.values() if s.shape == shape.key and s.job is None), key=lambda s: -s.idle_since)
            started = _spread([s for s in idle if s.node_id])
            waiting = [s for s in idle if not s.node_id]
            taken = (started + waiting)[:count]
            taken += [self._new_slot(shape) for _ in range(count - len(taken))]
            for s in taken:
                s.job = job
        self._wake.set()
        return [s.actor for s in taken]

    def give_back(self, job: str, actors: list[Any]) -> None:
        """The job is done with these slots and their tasks ended cleanly: reset
        them for the next job, or let them go when reuse is off."""
        if not self.settings.reuse:
            self.forget(actors, kill=True)
            return
        resets = {_id(a): a.reset.remote() for a in actors}
        for aid, ref in resets.items():
            try:
                ray.get(ref, timeout=30)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                self.forget([a for a in actors if _id(a) == aid], kill=True)
                continue
            with self._lock:
                slot = self._slots.get(aid)
                if slot is not None and slot.job == job:
                    slot.job, slot.idle_since = None, time.monotonic()

    def forget(self, actors: list[Any], kill: bool = False) -> None:
        """These slots are gone (the job killed them) or must go."""
        with self._lock:
            for a in actors:
                gone = self._slots.pop(_id(a), None)
                if gone is not None:
                    self._refill_now.add(gone.shape)
        if kill:
            for a in actors:
                ray.kill(a, no_restart=True)
        self._wake.set()

    def reclaim(self, job: str) -> int:
        """Take back every slot leased to ``job`` (its coordinator was restarted
        and redeploys from a checkpoint: the old attempt must not run on). Each
        slot cancels its old task and comes back idle for the recovery to reuse,
        as a failover reuses the slots of cancelled tasks; one whose task does
        not return within CANCEL_GRACE_S is killed. Returns how many were killed."""
        with self._lock:
            leased = [s.actor for s in self._slots.values() if s.job == job]
        answers = {_id(a): a.abandon.remote(CANCEL_GRACE_S) for a in leased}
        freed, victims = [], []
        for a in leased:
            try:
                (freed if ray.get(answers[_id(a)], timeout=CANCEL_GRACE_S + 10) else victims).append(a)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                victims.append(a)
        with self._lock:
            for a in freed:
                slot = self._slots.get(_id(a))
                if slot is not None and slot.job == job:
                    slot.job, slot.idle_since = None, time.monotonic()
        self.forget(victims, kill=True)
        for a in victims:  # wait until they are gone: no letter of theirs may reach the new attempt
            try:
                ray.get(a.ping.remote(), timeout=30)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                pass
        return len(victims)

    def _new_slot(self, shape: Shape) -> _Slot:
        from actors.task_actor import RemoteTaskActor

        actor = RemoteTaskActor.options(**shape.options, runtime_env=shape.runtime_env).remote()
        slot = _Slot(actor, shape.key, actor.ready.remote())
        self._slots[_id(actor)] = slot
        self.created["slots"] += 1
        return slot

    # ------------------------------------------------------------ jobs
    def submit(self, assignment: JobAssignment, runtime_env: dict[str, Any]) -> tuple[Any, str | None]:
        """Start a job on an idle coordinator. Returns (coordinator, None), or
        (None, status) when a job of that name is still running."""
        name = assignment.graph.name
        with self._lock:
            old = self._jobs.get(name)
        if old is not None:
            actor = self._coordinators[old[0]].actor
            try:
                status = ray.get(actor.status.remote(name), timeout=10)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                status = "FAILED"  # its record is gone
            if status not in ("FINISHED", "FAILED", "CANCELED", "SUSPENDED"):
                return None, status
        env_key = json.dumps(runtime_env, sort_keys=True, default=str)
        for _try in range(3):
            with self._lock:
                self._envs.setdefault(env_key, runtime_env)
                idle = [c for c in self._coordinators.values() if c.env == env_key and c.job is None and not c.retiring]
                coordinator = idle[0] if idle else self._new_coordinator(env_key)
                coordinator.job = name
                self._jobs[name] = (_id(coordinator.actor), assignment)
            self._wake.set()
            try:
                ray.get(coordinator.actor.start.remote(assignment))
                with self._lock:
                    assignment.started = True
                return coordinator.actor, None
            except ray.exceptions.RayActorError:  # it died idle: drop it, take another
                with self._lock:
                    self._coordinators.pop(_id(coordinator.actor), None)
                    self._jobs.pop(name, None)
        raise RuntimeError(f"could not start a job coordinator for '{name}'")

    def assignment(self, coordinator_id: str) -> JobAssignment | None:
        """The running job of a coordinator that Ray restarted (one more
        incarnation); None when its job had ended (an ended job never runs
        again) or when the job was only on its way to it: a coordinator killed
        idle and handed a job before its new process was up gets that job by
        its ``start`` call, once."""
        with self._lock:
            c = self._coordinators.get(coordinator_id)
            if c is None or c.job is None:
                return None
            assignment = self._jobs[c.job][1]
            if not assignment.started:
                return None
            assignment.incarnation += 1
            return assignment

    def job_finished(self, coordinator_id: str, reusable: bool) -> None:
        """The coordinator's job has ended: it is free for the next job, unless Ray
        restarted it (its restart budget is spent in part): then it serves no
        other job and leaves once its records are forgotten."""
        with self._lock:
            c = self._coordinators.get(coordinator_id)
            if c is not None:
                c.job = None
                c.retiring = not reusable
        self._wake.set()

    def forget_job(self, job: str, coordinator_id: str) -> None:
        """The ended job's record has lingered long enough (``WEIR_JOB_LINGER_S``)."""
        with self._lock:
            if self._jobs.get(job, ("",))[0] == coordinator_id:
                del self._jobs[job]
            c = self._coordinators.get(coordinator_id)
            leaving = c is not None and c.retiring and not any(cid == coordinator_id for cid, _ in self._jobs.values())
            if leaving:
                del self._coordinators[coordinator_id]
        if leaving:
            ray.kill(c.actor, no_restart=True)

    def coordinator_of(self, job: str) -> Any:
        with self._lock:
            entry = self._jobs.get(job)
            return self._coordinators[entry[0]].actor if entry else None

    def jobs(self) -> list[str]:
        """Jobs running or ended lately (their records linger)."""
        with self._lock:
            return sorted(self._jobs)

    def idle_slots(self) -> list[Any]:
        """The idle slots' actors (for operators and tests: killing one rehearses
        a slot that dies while it waits)."""
        with self._lock:
            return [s.actor for s in self._slots.values() if s.job is None and s.node_id]

    def idle_coordinators(self) -> list[Any]:
        """The idle job coordinators' actors (for operators and tests, as
        :meth:`idle_slots`)."""
        with self._lock:
            return [c.actor for c in self._coordinators.values() if c.job is None and not c.retiring]

    def slot_ids(self) -> list[str]:
        """Every slot the pool holds, idle or leased (Ray actor ids)."""
        with self._lock:
            return list(self._slots)

    def running_jobs(self) -> list[str]:
        with self._lock:
            return sorted(c.job for c in self._coordinators.values() if c.job is not None)

    def _new_coordinator(self, env_key: str) -> _Coordinator:
        from actors.coordinator import RemoteJobCoordinator

        actor = RemoteJobCoordinator.options(
            num_cpus=0, max_concurrency=64, runtime_env=self._envs[env_key],
            max_restarts=COORDINATOR_RESTARTS, max_task_retries=COORDINATOR_RESTARTS,
        ).remote()
        c = _Coordinator(actor, env_key, actor.ready.remote())
        self._coordinators[_id(actor)] = c
        self.created["coordinators"] += 1
        return c

    # ------------------------------------------------------------ upkeep
    def stats(self) -> dict[str, Any]:
        with self._lock:
            shapes = []
            for key, shape in self._shapes.items():
                mine = [s for s in self._slots.values() if s.shape == key]
                shapes.append({
                    "shape": ", ".join(f"{k}={v}" for k, v in sorted(shape.options.items()) if k != "scheduling_strategy"),
                    "idle": sum(1 for s in mine if s.job is None and s.node_id),
                    "starting": sum(1 for s in mine if s.job is None and not s.node_id),
                    "leased": sum(1 for s in mine if s.job is not None),
                })
            return {
                "settings": vars(self.settings),
                "shapes": shapes,
                "idle_coordinators": sum(1 for c in self._coordinators.values() if c.job is None and not c.retiring),
                "jobs": sorted(self._jobs),
                "created": dict(self.created),
            }

    def _refill_loop(self) -> None:
        while True:
            self._wake.wait(self.REFILL_EVERY_S)
            self._wake.clear()
            if not ray.is_initialized():  # the process is shutting down, or a pool built outside Ray (tests)
                continue
            try:
                self._refill()
            except Exception:  # keep the pool alive; the next round tries again
                log.exception("refilling the slot pool failed")

    def _refill(self) -> None:
        now = time.monotonic()
        retire = []
        # Idle slots never take the cluster's last CPU_RESERVE CPUs: Spark, Ray
        # Data (whose tasks ask for a whole CPU) and other work keep room, and
        # idle slots give it back when it runs short.
        free = ray.available_resources().get("CPU", 0.0) - self.CPU_RESERVE
        with self._lock:
            # No spare starts beside a process still starting (a job's own slots
            # or coordinator, on a cold pool): on a small machine they would
            # compete with it for CPU. Replacing a lost slot does not wait.
            booting = any(not s.node_id for s in self._slots.values()) or any(not c.up for c in self._coordinators.values())
            for key, shape in self._shapes.items():
                idle = sorted((s for s in self._slots.values() if s.shape == key and s.job is None), key=lambda s: s.idle_since)
                in_use = now - self._leased_at.get(key, now) < 6 * self.settings.idle_timeout_s
                # Enough idle slots to redeploy the largest job of this shape at
                # once: a failover that restarts all its tasks need not wait.
                target = max(self.settings.idle_slots, self._largest_lease.get(key, 0)) if in_use else 0
                if len(idle) >= target:
                    self._short_since.pop(key, None)
                    self._refill_now.discard(key)
                elif key in self._refill_now or (now - self._short_since.setdefault(key, now) >= self.REFILL_DELAY_S and not booting):
                    # After a loss, every slot missing at once; otherwise one spare at a
                    # time, so a running job never shares the CPU with several starts.
                    for _ in range(target - len(idle) if key in self._refill_now else 1):
                        if free < shape.cpus or now < self._scarce_until:
                            break
                        self._new_slot(shape)
                        free -= shape.cpus
                extra = idle[: max(0, len(idle) - target)]
                retire += [s.actor for s in extra if now - s.idle_since > self.settings.idle_timeout_s]
                for slot in idle:  # short of room: the oldest idle ones go, and none start for a while
                    if free >= 0:
                        break
                    if slot.actor not in retire:
                        retire.append(slot.actor)
                        free += shape.cpus
                        self._scarce_until = now + self.settings.idle_timeout_s
            for env_key in self._envs if not booting else ():
                idle_c = sum(1 for c in self._coordinators.values() if c.env == env_key and c.job is None and not c.retiring)
                for _ in range(self.settings.idle_coordinators - idle_c):
                    self._new_coordinator(env_key)
            starting = {_id(s.actor): s.ready for s in self._slots.values() if not s.node_id}
            coming = {c.ready: c for c in self._coordinators.values() if not c.up}
        if coming:  # up, or dead starting (Ray restarts it): either way no longer starting
            ready, _ = ray.wait(list(coming), num_returns=len(coming), timeout=0)
            with self._lock:
                for ref in ready:
                    coming[ref].up = True
        if retire:  # retired on purpose: no refill for them
            with self._lock:
                for a in retire:
                    self._slots.pop(_id(a), None)
            for a in retire:
                ray.kill(a, no_restart=True)
        if starting:  # note the node of slots that came up; drop those that died starting
            ready, _ = ray.wait(list(starting.values()), num_returns=len(starting), timeout=0)
            done = {ref: aid for aid, ref in starting.items() if ref in ready}
            for ref, aid in done.items():
                try:
                    node = ray.get(ref)
                except ray.exceptions.RayError:
                    with self._lock:
                        self._slots.pop(aid, None)
                    continue
                with self._lock:
                    slot = self._slots.get(aid)
                    if slot is not None and not slot.node_id:
                        slot.node_id = node


def _spread(slots: list[_Slot]) -> list[_Slot]:
    """Interleave slots by node (keeping their order on each node), so a job's
    tasks land on as many nodes as it can."""
    by_node: dict[str, list[_Slot]] = {}
    for s in slots:
        by_node.setdefault(s.node_id, []).append(s)
    rounds = [[on_node[i] for on_node in by_node.values() if i < len(on_node)] for i in range(max(map(len, by_node.values()), default=0))]
    return [s for r in rounds for s in r]


RemoteSlotPool = ray.remote(SlotPool)


def get_pool(address: str | None = None, create: bool = True) -> Any:
    """The cluster's pool, started (on the head node) if there is none yet; with
    ``create=False`` None when there is none (and no cluster is ever started)."""
    ensure_ray(address, start=create)
    if not create:
        try:
            return ray.get_actor(POOL_NAME, namespace=NAMESPACE)
        except ValueError:
            return None
    return RemoteSlotPool.options(
        name=POOL_NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0, max_concurrency=256,
        resources={"node:__internal_head__": 0.001}, runtime_env=actor_runtime_env(),
    ).remote(PoolSettings.from_env())
