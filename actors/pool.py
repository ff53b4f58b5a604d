"""The slot pool: task actors and job coordinators running before a job needs them.

Starting a Ray actor starts a worker process, imports Ray, pyarrow and weir, and on
a small machine that takes seconds. So weir starts them ahead of time. One pool per
Ray cluster, a named actor (``weir-pool`` in the ``weir`` namespace) pinned to the
head node and created by the first job submitted (or ``weir pool start``), keeps:

- fresh **slots**, task actors whose process is up and has never run a job, per
  *shape*: the Ray options a task asks for (CPUs, GPUs, memory, custom
  resources, placement, concurrency) plus the submitter's runtime env (its
  ``working_dir``, ``pip``, env vars);
- fresh **job coordinators**, per runtime env;
- the **registry** of jobs by name and by exclusive output (``weir list``,
  ``RayJobClient.attach``): one running job per name and per output.

The rules (which application's code may run where, one name one job) are kept by
:class:`weir.actors.ledger.PoolLedger`, without Ray; this actor carries them out. A
background thread tops each shape up to its target of fresh slots, retires idle
ones after ``idle_timeout_s``, and retires the processes of applications whose
driver has exited.

A slot's life: fresh → leased to one job of one application, where it runs that
job's tasks across attempts and rescales → given back when the job ends: *reset*
(its task object, the Python modules the job imported from outside
site-packages and the standard library, and the job's fault-injection settings
are dropped) and idle for that application's next job, or killed when its task
did not end cleanly (killed, crashed, stuck after cancel), when its application
has ended, or when reuse is off (``WEIR_POOL_REUSE=0``). It never serves another
application. What a reused process still keeps is listed in docs/operations.md
("Jobs on a shared cluster").

Ownership: slots and coordinators are this actor's children, so they outlive the
driver that submitted a job (``weir run``, ``ray job submit``). Ray restarts no
coordinator: each one's ``until_gone`` call ends when it dies, and the pool then
hands its running job to a standby coordinator already up (Flink's standby
JobManagers), any number of times. The pool lives on the head node: losing it
is losing the cluster's control plane, and its children go with it.

Threading: a threaded actor; one lock guards the tables, and no Ray call waits
while holding it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import ray

from weir.actors.cluster import NAMESPACE, actor_runtime_env, ensure_ray
from weir.actors.coordinator import RemoteJobCoordinator, slot_shape
from weir.actors.ledger import Application, Conflict, JobAssignment, PoolLedger, PoolSettings, Shape, SlotState
from weir.actors.slots import CANCEL_GRACE_S, POOL_NAME, actor_id, find_pool
from weir.actors.task_actor import RemoteTaskActor
from weir.runtime.config import ExecutionConfig
from weir.runtime.errors import WeirError
from weir.runtime.job_lifecycle import JobStatus

log = logging.getLogger("weir.pool")


class SlotPool:
    REFILL_EVERY_S = 0.25
    CPU_RESERVE = 1.0
    SWEEP_WAIT_S = 5.0  # for a retiring slot's sweep of its node (see _retire)
    PROBE_WAIT_S = 2.0  # for idle slots to answer (see forget_dead); one still starting is left alone

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self.ledger = PoolLedger(settings)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._actors: dict[str, Any] = {}  # slot or coordinator id -> its actor
        self._starting: dict[str, Any] = {}  # id -> its ready() call, while its process starts
        self._alive: dict[str, Any] = {}  # application id -> the object its driver owns
        self._watches: dict[str, Any] = {}  # coordinator id -> its until_gone() call, which ends with it
        self.created = {"slots": 0, "coordinators": 0}
        threading.Thread(target=self._refill_loop, name="refill", daemon=True).start()

    # ------------------------------------------------------------ slots
    def lease(self, job: str, app: Application, shape: Shape, count: int) -> list[Any]:
        """``count`` slots of ``shape`` for ``job`` of ``app``, at once (see
        :meth:`PoolLedger.lease`). Those not started yet may wait for room on the
        cluster: the job's gateway waits for them (with its deadline, and gives up
        on a cancel)."""
        with self._lock:
            self._watch(app)
            taken, missing = self.ledger.lease(job, app.id, shape, count, time.monotonic())
            taken += [self._new_slot(shape, job, app.id) for _ in range(missing)]
            actors = [self._actors[sid] for sid in taken]
        self._wake.set()
        return actors

    def give_back(self, job: str, actors: list[Any]) -> None:
        """The job is done with these slots and their tasks ended cleanly: reset
        them for its application's next job, or let them go (see
        :meth:`PoolLedger.give_back`)."""
        resets = {actor_id(a): a.reset.remote() for a in actors}
        for a in actors:
            try:
                ray.get(resets[actor_id(a)], timeout=30)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                self.forget([a], kill=True)
                continue
            with self._lock:
                kept = self.ledger.give_back(job, actor_id(a), time.monotonic())
            if not kept:
                self.forget([a], kill=True)

    def forget(self, actors: list[Any], kill: bool = False) -> None:
        """These slots are gone (the job killed them) or must go."""
        with self._lock:
            self.ledger.forget_slots([actor_id(a) for a in actors], time.monotonic())
            for a in actors:
                self._actors.pop(actor_id(a), None)
        if kill:
            for a in actors:
                ray.kill(a, no_restart=True)
        self._wake.set()

    def forget_dead(self, actors: list[Any]) -> None:
        """A job found these idle slots dead at its setup. What killed them (a lost
        node, a user killing many) may have killed their idle siblings too: each
        idle slot is asked at once, and those found dead go with them, before the
        job leases replacements (it tries its setup a few times, and would lease
        the dead ones a batch a try)."""
        self.forget(actors)
        pings = {a.ping.remote(): a for a in self.idle_slots()}
        ready, _ = ray.wait(list(pings), num_returns=len(pings), timeout=self.PROBE_WAIT_S)
        dead = []
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                dead.append(pings[ref])
        if dead:
            self.forget(dead)

    def reclaim(self, job: str) -> int:
        """Take back every slot leased to ``job`` (another coordinator takes the
        job over and redeploys from a checkpoint: the old attempt must not run on). Each
        slot cancels its old task and comes back idle for the recovery to reuse,
        as a failover reuses the slots of cancelled tasks; one whose task does
        not return within CANCEL_GRACE_S is killed. Returns how many were killed."""
        with self._lock:
            leased = [self._actors[sid] for sid in self.ledger.leased_to(job)]
        answers = {actor_id(a): a.abandon.remote(CANCEL_GRACE_S) for a in leased}
        victims = []
        for a in leased:
            try:
                freed = ray.get(answers[actor_id(a)], timeout=CANCEL_GRACE_S + 10)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                freed = False
            if freed:
                with self._lock:
                    freed = self.ledger.give_back(job, actor_id(a), time.monotonic())
            if not freed:
                victims.append(a)
        self.forget(victims, kill=True)
        for a in victims:  # wait until they are gone: no letter of theirs may reach the new attempt
            try:
                ray.get(a.ping.remote(), timeout=30)
            except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
                pass
        return len(victims)

    def _new_slot(self, shape: Shape, job: str | None = None, app: str | None = None) -> str:

        actor = RemoteTaskActor.options(**shape.options, runtime_env=shape.runtime_env).remote()
        sid = actor_id(actor)
        self.ledger.add_slot(sid, shape.key, job, app)
        self._actors[sid], self._starting[sid] = actor, actor.ready.remote()
        self.created["slots"] += 1
        return sid

    # ------------------------------------------------------------ jobs
    def submit(self, assignment: JobAssignment, runtime_env: dict[str, Any]) -> tuple[Any, Conflict | None]:
        """Start a job on a coordinator of its application or a fresh one. Returns
        (coordinator, None), or (None, conflict) when a running job holds its name
        or one of its outputs (see :meth:`PoolLedger.reserve`)."""
        env_key = json.dumps(runtime_env, sort_keys=True, default=str)
        for _try in range(5):
            with self._lock:
                self._watch(assignment.app)
                outcome = self.ledger.reserve(assignment, runtime_env, env_key, time.monotonic())
                if not isinstance(outcome, Conflict):
                    cid = outcome if outcome is not None else self._new_coordinator(env_key)
                    if outcome is None:
                        self.ledger.place_job(assignment, cid)
                    actor = self._actors[cid]
                    for shape, count in assignment.slots:
                        for _ in range(self.ledger.expect(shape, count, assignment.app.id)):
                            self._new_slot(shape)
            self._wake.set()
            if isinstance(outcome, Conflict):
                if self._has_ended(outcome):
                    continue  # its name and outputs are free now
                return None, outcome
            try:
                ray.get(actor.start.remote(assignment))
            except ray.exceptions.RayActorError:  # it died idle: drop it, take another
                with self._lock:
                    self.ledger.start_failed(assignment.name, cid)
                    self._actors.pop(cid, None)
                continue
            except ray.exceptions.RayTaskError as exc:  # it could not load the job: the name and outputs are free
                with self._lock:
                    self.ledger.start_refused(assignment.name, cid, time.monotonic())
                raise exc.cause if isinstance(exc.cause, WeirError) else exc from None
            with self._lock:
                assignment.started = self.ledger.jobs[assignment.name].accepted = True
                orphaned = cid not in self.ledger.coordinators  # it died right after it accepted the job
                successor = self.ledger.take_over(assignment.name, env_key, cid, time.time()) if orphaned else None
            if successor is not None:
                self._take_over(*successor)
            return actor, None
        raise RuntimeError(f"could not start a job coordinator for '{assignment.name}'")

    def _has_ended(self, conflict: Conflict) -> bool:
        """Whether the job in the way has ended after all: its status is final
        (its coordinator is still reporting the end to the pool). A job on its
        way to its coordinator, and one whose coordinator does not answer, does
        not know it yet or has died (its job is being taken over), holds its
        name and outputs."""
        with self._lock:
            entry = self.ledger.jobs.get(conflict.job)
            actor = self._actors.get(conflict.coordinator)
            if entry is None or actor is None or not entry.assignment.started:
                return False
        try:
            if not JobStatus(ray.get(actor.status.remote(conflict.job), timeout=5)).is_terminal:
                return False
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            return False
        with self._lock:
            self.ledger.job_over(conflict.job, conflict.run_id)
        return True

    def job_finished(self, coordinator_id: str) -> None:
        """The coordinator's job has ended: its name and outputs are free."""
        with self._lock:
            self.ledger.job_ended(coordinator_id, time.monotonic())
        self._wake.set()

    def _coordinator_died(self, cid: str) -> None:
        with self._lock:
            for table in (self._actors, self._watches, self._starting):
                table.pop(cid, None)
            successor = self.ledger.coordinator_died(cid, time.time())
        if successor is not None:
            self._take_over(*successor)

    def _take_over(self, assignment: JobAssignment, cid: str | None, env_key: str) -> None:
        """Start ``assignment``'s next incarnation on coordinator ``cid`` (None: a
        new one), without waiting for it: should that one die too, its watch
        says so and the job moves on again."""
        with self._lock:
            if cid is None:
                cid = self._new_coordinator(env_key)
                self.ledger.place_job(assignment, cid)
            actor = self._actors[cid]
        log.warning(
            "job %s: its coordinator died; coordinator %s takes it over (incarnation %d)",
            assignment.name,
            cid[:8],
            assignment.incarnation,
        )
        threading.Thread(
            target=self._hand_over,
            args=(assignment.name, cid, actor.start.remote(assignment, True)),
            name=f"take-over-{assignment.name}",
            daemon=True,
        ).start()

    def _hand_over(self, job: str, cid: str, started: Any) -> None:
        """Once the successor has accepted the job, clients are sent to it. One
        that dies first is noticed by its watch, and the job moves on again."""
        try:
            ray.get(started)
        except ray.exceptions.RayError as exc:
            log.warning("job %s: coordinator %s could not take it over: %s", job, cid[:8], exc)
            return
        with self._lock:
            entry = self.ledger.jobs.get(job)
            if entry is not None and entry.coordinator == cid:
                entry.accepted = True

    def forget_job(self, job: str, coordinator_id: str) -> None:
        """The ended job's record has lingered long enough (``WEIR_JOB_LINGER_S``)."""
        with self._lock:
            leaving = self.ledger.forget_job(job, coordinator_id)
        if leaving:
            self._retire([], [coordinator_id])

    def exceptions_reported(self, job: str, incarnation: int, entries: list[dict[str, Any]]) -> None:
        """The job's coordinator lists these exceptions (newest first): a successor keeps them."""
        with self._lock:
            self.ledger.exceptions_reported(job, incarnation, entries)

    def rescaled(self, job: str, parallelism: dict[str, int]) -> None:
        """A rescale of ``job`` completed: a coordinator taking the job over keeps it."""
        with self._lock:
            self.ledger.rescaled(job, parallelism)

    def coordinator_of(self, job: str, wait_s: float = 30.0) -> Any:
        """The coordinator that answers for ``job`` (None: no such job). While the
        job is on its way to a coordinator, waits (up to ``wait_s``) until it has
        arrived, so a client never asks one that does not know it yet."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                entry = self.ledger.jobs.get(job)
                if entry is None:
                    return None
                if entry.accepted or time.monotonic() > deadline:
                    return self._actors.get(entry.coordinator)
            time.sleep(0.02)

    def jobs(self) -> list[str]:
        """Jobs running or ended lately (their records linger)."""
        with self._lock:
            return sorted(self.ledger.jobs)

    def running_jobs(self) -> list[str]:
        with self._lock:
            return sorted(name for name, e in self.ledger.jobs.items() if not e.ended)

    def idle_slots(self) -> list[Any]:
        """The idle slots' actors, fresh or an application's (for operators and
        tests: killing one rehearses a slot that dies while it waits)."""
        with self._lock:
            return [
                self._actors[sid]
                for sid, s in self.ledger.slots.items()
                if s.state in (SlotState.FRESH, SlotState.IDLE)
            ]

    def idle_coordinators(self) -> list[Any]:
        """The idle job coordinators' actors (for operators and tests, as
        :meth:`idle_slots`)."""
        with self._lock:
            return [
                self._actors[cid] for cid, c in self.ledger.coordinators.items() if c.job is None and not c.retiring
            ]

    def slot_ids(self) -> list[str]:
        """Every slot the pool holds, idle or leased (Ray actor ids)."""
        with self._lock:
            return list(self.ledger.slots)

    def slot_owners(self) -> dict[str, str | None]:
        """Each slot's application (None: fresh), by Ray actor id."""
        with self._lock:
            return {sid: s.app for sid, s in self.ledger.slots.items()}

    def _new_coordinator(self, env_key: str) -> str:

        # Ray does not restart it: when it dies, its watch tells the pool, which
        # hands its job to a standby coordinator already up.
        actor = RemoteJobCoordinator.options(
            num_cpus=0, max_concurrency=64, runtime_env=self.ledger.envs[env_key]
        ).remote()
        cid = actor_id(actor)
        self.ledger.add_coordinator(cid, env_key)
        self._actors[cid], self._starting[cid] = actor, actor.ready.remote()
        self._watches[cid] = actor.until_gone.remote()
        self.created["coordinators"] += 1
        return cid

    def _watch(self, app: Application) -> None:
        if app.alive is not None:
            self._alive.setdefault(app.id, app.alive[0])

    def warm_up(self, shape: Shape, runtime_env: dict[str, Any], wait_s: float) -> dict[str, Any]:
        """Start at once the fresh slots of ``shape`` and the job coordinator of
        ``runtime_env`` the pool keeps, and return the pool's stats once those
        of that shape and env are up (or after ``wait_s``): a cluster's start,
        after which a first job starts as fast as later ones (see
        :func:`warm_pool`)."""
        env_key = json.dumps(runtime_env, sort_keys=True, default=str)
        free = ray.available_resources().get("CPU", 0.0) - self.CPU_RESERVE
        with self._lock:
            plan = self.ledger.warm_up(shape, env_key, runtime_env, time.monotonic(), free)
            for key in plan.new_slots:
                self._new_slot(self.ledger.shapes[key])
            for key in plan.new_coordinators:
                self._new_coordinator(key)
            ours = {sid for sid, slot in self.ledger.slots.items() if slot.shape == shape.key}
            ours |= {cid for cid, c in self.ledger.coordinators.items() if c.env == env_key}
            starting = {aid: ref for aid, ref in self._starting.items() if aid in ours}
        ready, _ = ray.wait(list(starting.values()), num_returns=len(starting), timeout=wait_s)
        for aid, ref in starting.items():
            if ref in ready:
                self._came_up(aid, ref)
        return self.stats()

    # ------------------------------------------------------------ upkeep
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self.ledger.stats(), "created": dict(self.created)}

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
        """Carry out the ledger's refill plan, note the processes that came up, and
        retire those of applications whose driver has exited."""
        # Idle slots never take the cluster's last CPU_RESERVE CPUs: Spark, Ray
        # Data (whose tasks ask for a whole CPU) and other work keep room.
        free = ray.available_resources().get("CPU", 0.0) - self.CPU_RESERVE
        with self._lock:
            plan = self.ledger.refill(time.monotonic(), free)
            for key in plan.new_slots:
                self._new_slot(self.ledger.shapes[key])
            for env_key in plan.new_coordinators:
                self._new_coordinator(env_key)
            starting = dict(self._starting)
            watched = {app: self._alive[app] for app in self.ledger.live_apps() if app in self._alive}
            watches = dict(self._watches)
        if watches:
            gone, _ = ray.wait(list(watches.values()), num_returns=len(watches), timeout=0)
            for cid in [cid for cid, ref in watches.items() if ref in gone]:
                self._coordinator_died(cid)
        self._retire(plan.retire_slots, plan.retire_coordinators)
        if starting:  # up, or dead starting: either way no longer starting
            ready, _ = ray.wait(list(starting.values()), num_returns=len(starting), timeout=0)
            for aid, ref in starting.items():
                if ref in ready:
                    self._came_up(aid, ref)
        for app, alive in watched.items():
            if _owner_died(alive):
                with self._lock:
                    ended = self.ledger.app_ended(app)
                    del self._alive[app]
                log.info(
                    "application %s has ended: retiring its %d idle process(es)",
                    app,
                    len(ended.retire_slots) + len(ended.retire_coordinators),
                )
                self._retire(ended.retire_slots, ended.retire_coordinators)

    def _came_up(self, aid: str, ref: Any) -> None:
        try:
            node = ray.get(ref)
        except ray.exceptions.RayError:
            node = None
        with self._lock:
            if self._starting.pop(aid, None) is None:  # noted already (the refill thread and a warm-up both look)
                return
            if aid in self.ledger.coordinators:
                self.ledger.coordinators[aid].up = True
            elif node is None:  # a slot that died starting
                self.ledger.forget_slots([aid], time.monotonic())
                self._actors.pop(aid, None)
            else:
                self.ledger.slot_up(aid, node)

    def _retire(self, slots: list[str], coordinators: list[str]) -> None:
        """Kill these processes; each slot first sweeps its node of dead processes'
        RocksDB folders (see :meth:`TaskActor.sweep`), for up to SWEEP_WAIT_S."""
        ids = slots + coordinators
        with self._lock:
            actors = {i: self._actors.pop(i) for i in ids if i in self._actors}
            for i in ids:
                self._starting.pop(i, None)
                self._watches.pop(i, None)
        sweeps = [actors[i].sweep.remote() for i in slots if i in actors]
        if sweeps:
            ray.wait(sweeps, num_returns=len(sweeps), timeout=self.SWEEP_WAIT_S)
        for a in actors.values():
            ray.kill(a, no_restart=True)


def _owner_died(alive: Any) -> bool:
    """Whether the driver that owns this object has exited (Ray loses an object
    with its owner)."""
    ready, _ = ray.wait([alive], timeout=0)
    if not ready:
        return False
    try:
        ray.get(alive, timeout=0)
        return False
    except ray.exceptions.OwnerDiedError:
        return True
    except ray.exceptions.RayError:
        return False


RemoteSlotPool = ray.remote(SlotPool)


def warm_pool(address: str | None = None, task_cpus: float | None = None, wait_s: float = 120.0) -> dict[str, Any]:
    """Join the cluster (or start a local one, see :func:`ensure_ray`) and have its
    pool start, at once, what this driver's first job takes: the fresh task
    slots it keeps (``WEIR_POOL_IDLE_SLOTS``; of the default shape, or with
    ``task_cpus`` as ``set_task_cpus`` gives them) and a job coordinator, in this
    driver's runtime env. Returns the pool's stats once they are up. ``weir pool
    start`` does this; so should a cluster's start commands: each process takes
    seconds to start, which a job would otherwise wait for."""
    pool = get_pool(address)
    runtime_env = actor_runtime_env()
    execution = ExecutionConfig() if task_cpus is None else ExecutionConfig(task_cpus=task_cpus)
    return ray.get(pool.warm_up.remote(slot_shape({}, execution, runtime_env), runtime_env, wait_s))


def get_pool(address: str | None = None, create: bool = True) -> Any:
    """The cluster's pool, started (on the head node) if there is none yet; with
    ``create=False`` None when there is none (and no cluster is ever started)."""
    ensure_ray(address, start=create)
    if not create:
        return find_pool()
    return RemoteSlotPool.options(
        name=POOL_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=256,
        resources={"node:__internal_head__": 0.001},
        runtime_env=actor_runtime_env(),
    ).remote(PoolSettings.from_env())
