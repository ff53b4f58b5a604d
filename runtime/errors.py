"""The errors a weir user sees: one small tree under :class:`WeirError`.

Every error crosses process boundaries (task actor -> job coordinator -> driver),
so each one pickles by its attributes, and the user's own exception travels both
as an object (when it pickles) and as formatted traceback text (always).
"""

from __future__ import annotations

import enum
import traceback
from typing import Any


class WeirError(Exception):
    """Base of every error weir raises on purpose."""

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        for name, value in attrs.items():
            setattr(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        attrs = {k: v for k, v in self.__dict__.items() if k != "message"}
        return (_rebuild, (type(self), self.message, attrs))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[WeirError], message: str, attrs: dict[str, Any]) -> WeirError:
    err = cls.__new__(cls)
    WeirError.__init__(err, message, **attrs)
    # Pickling drops __cause__; the cause travels as an attribute, so chain it again.
    err.__cause__ = attrs.get("cause") or attrs.get("user_exception")
    return err


class InvalidConfigurationError(WeirError, ValueError):
    """A setting has a value weir cannot run with; ``setting`` names it."""

    def __init__(self, setting: str, value: Any, reason: str) -> None:
        super().__init__(f"invalid setting {setting}={value!r}: {reason}", setting=setting, value=value)


class InvalidJobGraphError(WeirError, ValueError):
    """The job's dataflow cannot be built (wrong parallelism, bad edge, ...)."""


def describe_record(record: Any, limit: int = 200) -> str:
    """A record's repr for an error message, cut to ``limit`` characters."""
    try:
        text = repr(record)
    except Exception:  # a user's __repr__ may itself raise
        text = f"<{type(record).__name__} with a failing __repr__>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class UserFunctionError(WeirError):
    """A user function raised. Carries the operator, the function's role, the record
    (when there is one), the user's exception (``__cause__`` on the driver) and its
    formatted traceback, which survives any trip across processes."""

    def __init__(
        self, operator: str, function: str, cause: BaseException, record: Any = None, has_record: bool = False
    ) -> None:
        where = f"{function} of operator '{operator}'"
        on = f" on record {describe_record(record)}" if has_record else ""
        user_tb = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
        message = f"{where} raised {type(cause).__name__}: {cause}{on}\n\nUser traceback:\n{user_tb}"
        super().__init__(
            message,
            operator=operator,
            function=function,
            record_repr=describe_record(record) if has_record else None,
            user_traceback=user_tb,
            user_exception=_picklable_or_none(cause),
        )
        self.__cause__ = cause


def _picklable_or_none(exc: BaseException) -> BaseException | None:
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return exc


class KeySelectionError(UserFunctionError):
    """A key selector returned a key weir cannot hash stably (e.g. a list or a dict)."""


class RecordSerializationError(WeirError):
    """A record (or a piece of state) could not be pickled to cross to another task."""

    def __init__(self, operator: str, record: Any, cause: BaseException) -> None:
        super().__init__(
            f"operator '{operator}' emitted a record that cannot be pickled: {describe_record(record)} "
            f"({type(cause).__name__}: {cause}). Records crossing tasks must be picklable.",
            operator=operator,
            record_repr=describe_record(record),
        )


class RecordDeserializationError(WeirError):
    """A delivery from another task could not be unpickled by the receiving task
    (a class whose ``__setstate__``/``__reduce__`` raises, a module the receiving
    process lacks). Names the receiving ``task``, its input ``channel``, the
    sending task (``producer``) and operator (``operator``, its uid); ``cause``
    is the exception unpickling raised, when it pickles itself."""

    def __init__(self, task: str, channel: int, producer: str, operator: str, cause: BaseException) -> None:
        sender = f"operator '{operator}' (task {producer})" if operator else f"task {producer}"
        super().__init__(
            f"task {task} cannot unpickle a delivery on its input channel {channel} from {sender}: "
            f"{type(cause).__name__}: {cause}",
            task=task,
            channel=channel,
            producer=producer,
            operator=operator,
            cause=_picklable_or_none(cause),
        )
        self.__cause__ = cause


class MalformedInputError(WeirError, ValueError):
    """A source read input it cannot parse. Names the input (a file), where in it
    (a line, a row) and what is wrong; the bytes are data, never unpickled."""

    def __init__(self, source: str, where: str, problem: str, text: Any = None) -> None:
        quoted = "" if text is None else f": {describe_record(text)}"
        super().__init__(f"{source}, {where}: {problem}{quoted}", source=source, where=where)


class RecordTypeError(WeirError, TypeError):
    """A record does not fit the type declared for it (PyFlink's ``output_type=``,
    ``type_info=``, an ``OutputTag``'s type): names the operator, the type and the record."""

    def __init__(self, operator: str, type_info: Any, record: Any, cause: BaseException) -> None:
        super().__init__(
            f"operator '{operator}' emitted a record that does not fit its declared type {type_info!r}: {cause} "
            f"(the record: {describe_record(record)})",
            operator=operator,
            type_info=type_info,
            record_repr=describe_record(record),
        )


class StateSerializationError(WeirError):
    """Operator state could not be pickled for a checkpoint."""

    def __init__(self, task: str, cause: BaseException) -> None:
        super().__init__(
            f"task {task} holds state that cannot be pickled ({type(cause).__name__}: {cause}); "
            "everything kept in weir state must be picklable",
            task=task,
        )


class CheckpointFailureReason(enum.Enum):
    """Why a checkpoint did not complete. Each member carries its message."""

    TIMEOUT = "the checkpoint expired before it completed"
    DECLINED_SUBSUMED = "a newer checkpoint barrier arrived before alignment finished"
    DECLINED_CANCELLED = "an upstream task cancelled the checkpoint"
    DECLINED_SNAPSHOT_FAILED = "a task failed to snapshot its state"
    DECLINED_STORAGE_FAILED = "a task failed to write its state to checkpoint storage"
    TASK_FINISHED_BEFORE_ACK = "a task finished before it acknowledged the checkpoint"
    TASK_FAILURE = "a task failed while the checkpoint was pending"
    JOB_STOPPING = "the job is stopping or restarting"
    STORAGE_FAILURE = "writing the checkpoint metadata failed"
    UNION_STATE_PARTIALLY_FINISHED = "an operator with union list state has finished on some subtasks only"

    @property
    def message(self) -> str:
        return str(self.value)


class CheckpointDeclinedError(WeirError):
    def __init__(self, checkpoint_id: int, reason: CheckpointFailureReason, detail: str = "") -> None:
        text = f"checkpoint {checkpoint_id} aborted: {reason.message}"
        super().__init__(text + (f" ({detail})" if detail else ""), checkpoint_id=checkpoint_id, reason=reason)


class CorruptCheckpointError(WeirError):
    """A checkpoint file is missing, truncated or fails its checksum; ``path`` names it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"checkpoint file {path} is unusable: {problem}", path=path)


class CheckpointStorageError(WeirError):
    """Checkpoint storage cannot be read, listed or written (after retries); names it."""

    def __init__(self, location: str, problem: str) -> None:
        super().__init__(f"checkpoint storage {location} {problem}", location=location)


class FencedError(WeirError):
    """A job master found that a newer one took its job over (a coordinator Ray
    declared dead that still runs: a network partition): it stands down without
    writing or deleting anything in the run's checkpoint storage (Flink's fencing
    by leader session)."""

    def __init__(self, job: str, root: str, mine: int, newer: int) -> None:
        super().__init__(
            f"job '{job}': its job master (incarnation {mine}) was taken over by incarnation {newer}, which owns "
            f"checkpoint storage {root} now; this one stood down without writing there",
            location=root,
        )


class SinkBacklogError(WeirError):
    """A two-phase-commit sink holds more output waiting for a completed checkpoint
    than its bound allows, because checkpoints keep failing. Names the operator,
    what it holds, the bound and how many checkpoints failed in a row."""

    def __init__(self, operator: str, held_bytes: int, bound_bytes: int, failed: int) -> None:
        super().__init__(
            f"sink '{operator}' holds {held_bytes} bytes of output that no completed checkpoint has committed, "
            f"past its bound of {bound_bytes} bytes (Sink.max_pending_bytes): {failed} checkpoint(s) failed in a row, "
            "and its records wait for a completed checkpoint; the task fails so that the job restarts from the "
            "latest completed checkpoint instead of growing until it runs out of memory",
            operator=operator,
            held_bytes=held_bytes,
            bound_bytes=bound_bytes,
        )


class TaskFailedError(WeirError):
    """A task failed outside its user functions: its actor died (killed, crashed,
    node lost), a letter to it was lost, or it ended without a word; names the task."""

    def __init__(self, task: str, detail: str) -> None:
        super().__init__(f"task {task}: {detail}", task=task)


class UnknownTaskError(WeirError):
    """A client named a task the job does not run; says why, and lists those it runs."""

    WHY = {
        "finished": "it finished",
        "absent": "the job has no such task",
        "ended": "the job ended",
        "deploying": "it is not deployed yet",
    }

    @classmethod
    def of(cls, job: str, vertex: str, subtask: int, state: str, running: list[str]) -> "UnknownTaskError":
        """``state``: a key of ``WHY``, or the reason itself."""
        return cls(
            f"job '{job}' has no task {vertex}/{subtask} running ({cls.WHY.get(state, state)}); "
            f"its tasks: {', '.join(running) or 'none'}"
        )


class OperatorContractError(WeirError):
    """An operator broke its lifecycle's rules: it emitted after the end of its
    input or in ``close()``, or got records after it had fully finished."""


class JobRequestError(WeirError):
    """A savepoint, stop or rescale that did not happen, and why: the job was not
    running, a region was restarting, the savepoint failed, or the job ended first."""


class TooManyCheckpointFailuresError(WeirError):
    """More checkpoints failed in a row than the job tolerates (its storage works,
    so the cause is in the job: see the last failure named)."""


class NoRestorePointError(WeirError):
    """A job that must restore (after a failure, or a job master's restart) has no
    complete checkpoint left to restore from; it does not start from scratch,
    which would drop its state without a word."""


class RecordedFailureError(WeirError):
    """A job's failure as its recorded end holds it (a restarted job master read it
    from storage; the original exception's type is not kept)."""


class SlotBusyError(WeirError):
    """A task actor or job coordinator was handed work while it still ran other
    work: a bug in weir's pool, reported instead of mixing two jobs."""


class JobCoordinatorLostError(WeirError):
    """The job's coordinator died and no other took the job over in time."""


class SparkBridgeError(WeirError):
    """The Spark bridge cannot run: pyspark or raydp is not installed, Java is
    missing, no raydp Spark session runs, or Spark's executors are gone."""


class JobStatusError(WeirError):
    """A job master tried a status change its transition table does not allow: a
    bug in weir (the job fails with it)."""


class NoResourceAvailableError(WeirError):
    """Tasks found no room on the cluster within the slot request timeout (Flink's
    NoResourceAvailableException); says what they ask for and what is free."""


class JobExecutionError(WeirError):
    """The job failed for good: restarts ran out or were not allowed. ``cause`` is the
    last failure (a :class:`UserFunctionError` carries the user's traceback)."""


class JobForgottenError(WeirError):
    """The job ended longer ago than its record lingers (``WEIR_JOB_LINGER_S``):
    its coordinator no longer knows it. Its end is still in checkpoint storage."""


class JobCancelledError(WeirError):
    """The job was cancelled while a caller waited for its result."""


class JobLoadError(WeirError):
    """The cluster could not load the job's code (the job graph does not unpickle
    in its coordinator: a module only the driver can import, a library of another
    version). Names the module or the error; nothing of the job started, and its
    name and outputs are free again."""


class JobAlreadyRunningError(WeirError):
    """A job of the same name runs on the cluster (submitted by any driver): one
    name, one running job. Names the running job and how to reach or stop it."""


class OutputInUseError(WeirError):
    """A sink's exclusive output (a FileSink's folder, a Kafka transactional-id
    prefix) is written by another running job; refused before anything is
    written. Names both jobs, the sink and the output."""


class LocalDiskFullError(WeirError):
    """A task's local disk ran full while it wrote its RocksDB state (ENOSPC): a
    failure of the node, not of the job's code. Names the folder and operator.
    The job restarts (with the restart strategy's backoff) at most
    ``LOCAL_DISK_FULL_RESTARTS`` times within ``LOCAL_DISK_FULL_WINDOW_S``
    (``weir.runtime.failover``); the next one fails it."""

    def __init__(self, folder: str, operator: str, problem: str) -> None:
        super().__init__(
            f"local disk full: operator '{operator}' cannot write its RocksDB state in {folder} ({problem}); "
            "free space on that disk or point EmbeddedRocksDBStateBackend.set_db_storage_paths at a larger one "
            "(a job that keeps finding it full fails rather than restarting for ever)",
            folder=folder,
            operator=operator,
        )
