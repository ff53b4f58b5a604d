"""Job settings: checkpointing, restart strategies, transport. Every setter
validates at once and names the setting at fault."""

from __future__ import annotations

import enum
import math
import numbers
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Any

from weir.runtime.errors import InvalidConfigurationError

DEFAULT_MAX_PARALLELISM = 128
MAX_MAX_PARALLELISM = 32768


class CheckpointingMode(enum.Enum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class RuntimeExecutionMode(enum.Enum):
    """How a job runs (PyFlink's ``pyflink.datastream.RuntimeExecutionMode``).

    ``STREAMING`` (the default): records flow as they come, keyed reduces emit
    every update, watermarks come from the strategies, periodic checkpoints as
    configured. ``BATCH``: only for jobs whose every source is bounded; each
    keyed reduce emits one final value per key at the end of input, the
    watermark is perfect (none until ``MAX_WATERMARK`` at the end: watermark
    generators are ignored, timestamp assigners still stamp), processing time
    does not advance for timers (every timer fires at the end of input), there
    are no periodic checkpoints, and a failure restarts the job from its start,
    while sinks publish at its end. ``AUTOMATIC``: ``BATCH`` when every source
    is bounded, else ``STREAMING``."""

    STREAMING = "STREAMING"
    BATCH = "BATCH"
    AUTOMATIC = "AUTOMATIC"


class Configuration:
    """PyFlink's ``Configuration``: settings under Flink's keys, kept as strings.
    ``StreamExecutionEnvironment.get_execution_environment(configuration)`` applies
    ``parallelism.default`` and ``execution.runtime-mode``, and warns of the keys
    it does not apply (weir's settings are the environment's methods)."""

    def __init__(self, other: "Configuration | None" = None) -> None:
        self._data: dict[str, str] = dict(other._data) if other is not None else {}

    def set_string(self, key: str, value: str) -> "Configuration":
        self._data[key] = str(value)
        return self

    def get_string(self, key: str, default_value: str) -> str:
        return self._data.get(key, default_value)

    def set_integer(self, key: str, value: int) -> "Configuration":
        return self.set_string(key, str(int(value)))

    def get_integer(self, key: str, default_value: int) -> int:
        return int(self._data[key]) if key in self._data else default_value

    def set_float(self, key: str, value: float) -> "Configuration":
        return self.set_string(key, str(float(value)))

    def get_float(self, key: str, default_value: float) -> float:
        return float(self._data[key]) if key in self._data else default_value

    def set_boolean(self, key: str, value: bool) -> "Configuration":
        return self.set_string(key, "true" if value else "false")

    def get_boolean(self, key: str, default_value: bool) -> bool:
        return self._data[key].lower() == "true" if key in self._data else default_value

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def remove_config(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def key_set(self) -> set[str]:
        return set(self._data)

    def add_all(self, other: "Configuration", prefix: str | None = None) -> "Configuration":
        self._data.update({f"{prefix or ''}{k}": v for k, v in other._data.items()})
        return self

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)


def default_checkpoint_storage() -> str:
    """``<temp>/weir-<uid>/checkpoints``: in a folder of this user's in the temp
    folder, readable by no one else. The temp folder is shared, and checkpoints
    are a trust boundary (anyone who can plant a checkpoint there chooses what a
    job restores). A folder by that name that another user owns is refused, here
    and by checkpoint storage on every node (see :func:`private_folder_of`)."""
    folder = os.path.join(tempfile.gettempdir(), f"weir-{os.getuid()}")
    problem = claim_private_folder(folder)
    if problem:
        raise InvalidConfigurationError("default checkpoint storage", folder, problem)
    return "file://" + os.path.join(folder, "checkpoints")


_PRIVATE_FOLDER = re.compile(r"^(.*/weir-\d+)/checkpoints(?:/|$)")


def private_folder_of(path: str) -> str | None:
    """The private folder (``<temp>/weir-<uid>``) of the default checkpoint storage
    that the local ``path`` lies in, if it does. The driver checks it when it picks
    the default; a task on another node reaches the same path with no check of its
    own, so checkpoint storage checks it by this shape."""
    m = _PRIVATE_FOLDER.match(path)
    return m.group(1) if m else None


def claim_private_folder(folder: str) -> str:
    """Create ``folder`` (0700) if it is missing, narrow it to 0700 if it is ours;
    return what makes it unfit to hold checkpoints ("" if nothing): a link, or
    another user's folder."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError as exc:  # e.g. a file by that name
        return f"cannot be made a folder ({exc})"
    # lstat: a link to a folder is a link, which another user may have planted.
    if not stat.S_ISDIR(st.st_mode):
        return "is a symbolic link, not a folder of this user's: choose a folder of yours with set_checkpoint_storage()"
    if st.st_uid != os.getuid():
        return (
            f"is not a folder of this user's (owner uid {st.st_uid}, this user {os.getuid()}): someone sharing "
            "the temp folder could read or plant checkpoints there; choose a folder of yours with "
            "set_checkpoint_storage()"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return ""


def validate_storage_uri(uri: str, setting: str = "checkpoint storage") -> str:
    """Resolve ``uri`` with pyarrow.fs now, so a typo fails at configuration time."""
    from pyarrow import fs

    if "://" not in uri:
        uri = "file://" + os.path.abspath(uri)
    try:
        fs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError with its own words
        raise InvalidConfigurationError(setting, uri, f"pyarrow.fs cannot open it ({exc})") from None
    return uri


def _number(setting: str, value: float, allow_zero: bool = False, at_least: float | None = None) -> float:
    """The one check every numeric setting goes through: a finite real number
    (NaN passes every comparison unnoticed, infinity overflows later), positive,
    or zero too with ``allow_zero``, or at least ``at_least``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InvalidConfigurationError(setting, value, "must be a finite number")
    if at_least is not None:
        if value < at_least:
            raise InvalidConfigurationError(setting, value, f"must be a number of at least {at_least:g}")
    elif value < 0 or (value == 0 and not allow_zero):
        raise InvalidConfigurationError(setting, value, "must be " + ("zero or more" if allow_zero else "positive"))
    return float(value)


def _whole(setting: str, value: int, allow_zero: bool = False) -> int:
    """A count or a number of milliseconds: a fraction would truncate (0.5 ms to 0)."""
    _number(setting, value, allow_zero)
    if value != int(value):
        raise InvalidConfigurationError(setting, value, "must be a whole number")
    return int(value)


@dataclass
class CheckpointConfig:
    """Periodic checkpointing. ``interval_ms=None`` means off; a bounded job still
    takes one final checkpoint when its sources finish, so two-phase-commit sinks
    commit their last data."""

    interval_ms: int | None = None
    timeout_ms: int = 60_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    retained: int = 1
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    storage: str = field(default_factory=default_checkpoint_storage)
    tolerable_failures: int | None = None

    @property
    def enabled(self) -> bool:
        return self.interval_ms is not None

    def set_checkpoint_interval(self, interval_ms: int) -> "CheckpointConfig":
        self.interval_ms = _whole("checkpoint interval_ms", interval_ms)
        return self

    def set_checkpoint_timeout(self, timeout_ms: int) -> "CheckpointConfig":
        self.timeout_ms = _whole("checkpoint timeout_ms", timeout_ms)
        return self

    def set_min_pause_between_checkpoints(self, min_pause_ms: int) -> "CheckpointConfig":
        self.min_pause_ms = _whole("checkpoint min_pause_ms", min_pause_ms, allow_zero=True)
        return self

    def set_max_concurrent_checkpoints(self, max_concurrent: int) -> "CheckpointConfig":
        self.max_concurrent = _whole("max_concurrent_checkpoints", max_concurrent)
        return self

    def set_num_retained_checkpoints(self, retained: int) -> "CheckpointConfig":
        self.retained = _whole("num_retained_checkpoints", retained)
        return self

    def set_checkpointing_mode(self, mode: CheckpointingMode) -> "CheckpointConfig":
        if not isinstance(mode, CheckpointingMode):
            raise InvalidConfigurationError(
                "checkpointing mode", mode, "use CheckpointingMode.EXACTLY_ONCE or AT_LEAST_ONCE"
            )
        self.mode = mode
        return self

    def set_checkpoint_storage(self, uri: str) -> "CheckpointConfig":
        self.storage = validate_storage_uri(uri)
        return self

    # PyFlink's name for the same setting.
    set_checkpoint_storage_dir = set_checkpoint_storage

    def set_tolerable_checkpoint_failure_number(self, count: int) -> "CheckpointConfig":
        self.tolerable_failures = _whole("tolerable_checkpoint_failures", count, allow_zero=True)
        return self


@dataclass(frozen=True)
class RestartStrategy:
    """How often and how soon a failed job restarts from its latest checkpoint.

    Use the constructors: :meth:`fixed_delay`, :meth:`exponential_delay`, :meth:`no_restart`.
    A job that sets none runs under :func:`restart_strategy_for`'s default.
    ``max_attempts`` None: no limit. ``max_delay_s`` 0: no cap. ``jitter``: each
    delay moves by up to this share of it, either way. ``reset_backoff_threshold_s``
    None: attempts count over the job's whole life and never reset (fixed delay);
    else they count since the last reset (see :meth:`exponential_delay`).
    """

    max_attempts: int | None
    initial_delay_s: float
    backoff_multiplier: float = 1.0
    max_delay_s: float = 0.0
    jitter: float = 0.0
    reset_backoff_threshold_s: float | None = None

    @staticmethod
    def fixed_delay(restart_attempts: int = 3, delay_s: float = 1.0) -> "RestartStrategy":
        """Flink's fixed-delay: ``restart_attempts`` restarts over the job's whole
        life, each after ``delay_s``; the next failure fails the job."""
        restart_attempts = _whole("restart_attempts", restart_attempts, allow_zero=True)
        delay_s = _number("restart delay_s", delay_s, allow_zero=True)
        return RestartStrategy(restart_attempts, delay_s, 1.0, delay_s)

    @staticmethod
    def exponential_delay(
        max_attempts: int | None = 10,
        initial_delay_s: float = 0.5,
        multiplier: float = 2.0,
        max_delay_s: float = 30.0,
        *,
        jitter: float = 0.1,
        reset_backoff_threshold_s: float = 3600.0,
    ) -> "RestartStrategy":
        """Flink's exponential-delay: the n-th restart since the last reset waits
        ``initial_delay_s * multiplier ** (n - 1)``, moved by up to ``jitter`` of it
        either way (Flink's jitter-factor: jobs that failed together do not restart
        in step), then capped at ``max_delay_s``, and never less than
        ``initial_delay_s``. ``max_attempts``: restarts allowed between resets
        (None: no limit, as Flink's attempts-before-reset-backoff); the next failure
        fails the job. Failures while a restart is on its way (other regions of the
        job failing meanwhile) join that restart and count once, as in Flink.

        The count and the delay go back to the start when the job ran
        ``reset_backoff_threshold_s`` since its latest restart without failing
        (Flink's reset-backoff-threshold), and, weir's own, when after a restart a
        checkpoint completed and then another that began after it: the job ran on
        from a checkpoint of its own and made that progress durable. (The first
        alone does not count: it may begin the moment the tasks are back and hold
        no more than they restored.) So kills now and then never escalate to long
        delays, while a record that fails its task every time it is read still
        does: the job fails on it before a second checkpoint completes."""
        if max_attempts is not None:
            max_attempts = _whole("restart max_attempts", max_attempts, allow_zero=True)
        initial_delay_s = _number("restart initial_delay_s", initial_delay_s, allow_zero=True)
        multiplier = _number("restart multiplier", multiplier, at_least=1)
        max_delay_s = _number("restart max_delay_s", max_delay_s, allow_zero=True)
        jitter = _number("restart jitter", jitter, allow_zero=True)
        if jitter > 1:
            raise InvalidConfigurationError("restart jitter", jitter, "must be between 0 and 1")
        reset_backoff_threshold_s = _number("restart reset_backoff_threshold_s", reset_backoff_threshold_s)
        return RestartStrategy(
            max_attempts, initial_delay_s, multiplier, max_delay_s, jitter, reset_backoff_threshold_s
        )

    @staticmethod
    def no_restart() -> "RestartStrategy":
        return RestartStrategy(0, 0.0)

    @property
    def resets(self) -> bool:
        """Whether attempts count since the last reset (else over the job's life)."""
        return self.reset_backoff_threshold_s is not None

    def delay_before(self, attempt: int, jitter_draw: float = 0.5) -> float:
        """Seconds to wait before restart number ``attempt`` (1-based, since the last
        reset). ``jitter_draw`` in [0, 1] places the delay in its jitter band: 0 at
        its low end, 0.5 in the middle (no jitter), 1 at its high end."""
        try:
            delay = self.initial_delay_s * self.backoff_multiplier ** (attempt - 1)
        except OverflowError:  # thousands of attempts without a reset: far past any cap
            delay = math.inf
        if math.isfinite(delay):
            delay += delay * self.jitter * (2 * jitter_draw - 1)
        if self.max_delay_s:
            delay = min(delay, self.max_delay_s)
        return max(delay, self.initial_delay_s)

    def allowance(self) -> str:
        """What it allows, for a failed job's message."""
        if self.max_attempts is None:
            return "restart strategy allows unlimited restarts"
        if self.resets:
            return f"restart strategy allows {self.max_attempts} in a row, counted since its backoff last reset"
        return f"restart strategy allows {self.max_attempts}"


def restart_strategy_for(strategy: RestartStrategy | None, checkpointing: bool) -> RestartStrategy:
    """The strategy a job runs under: the one set, else Flink's default (1.19+).
    With ``checkpointing`` that is exponential delay without limit, from 0.1 s
    doubling to at most 60 s, jitter 0.1, reset after an hour without failure or
    by checkpoints (see :meth:`RestartStrategy.exponential_delay`): a task killed
    now and then never fails the job, and a failure that comes back every time
    waits longer each time, up to a minute. Without checkpoints a restart goes
    back to the job's start, so a failure that comes back every time would redo
    all the work: ``fixed_delay(3, 0.5)``, then the job fails."""
    if strategy is not None:
        return strategy
    if checkpointing:
        return RestartStrategy.exponential_delay(None, 0.1, 2.0, 60.0, jitter=0.1, reset_backoff_threshold_s=3600.0)
    return RestartStrategy.fixed_delay(3, 0.5)


# Flink's spelling, for users who come from PyFlink.
RestartStrategies = RestartStrategy


@dataclass
class TransportConfig:
    """Batching and flow control of the channels between tasks."""

    # Records per channel buffer before it is sent. 1,024 small records (~12 KB
    # pickled, like Flink's 32 KB network buffers) stay in the CPU's caches: W1
    # cost 20% less CPU per record than with 4,096, side by side on 2 cores.
    batch_size: int = 1024
    buffer_timeout_ms: int = 5  # a non-empty buffer is sent at the latest after this
    mailbox_capacity: int = 4  # queued deliveries per input channel before senders block


@dataclass
class ExecutionConfig:
    parallelism: int = 1
    max_parallelism: int = DEFAULT_MAX_PARALLELISM
    task_cpus: float = 0.1  # Ray CPUs per task actor: 20 tasks fit on 2 cores
    placement: str = "spread"  # spread task actors over nodes, or pack them
    failover_strategy: str = "region"  # restart a failed task's pipelined region, or "full": every task
    restart_strategy: RestartStrategy | None = None  # None: restart_strategy_for's default
    transport: TransportConfig = field(default_factory=TransportConfig)
    watermark_interval_ms: int = 200  # how often sources emit watermarks
    restore_from: str | None = None  # a savepoint or retained checkpoint to start from
    allow_non_restored_state: bool = False  # drop its state of operators the job no longer has
    slot_request_timeout_ms: int = (
        300_000  # how long a deployment waits for room on the cluster (Flink's slot.request.timeout)
    )
    runtime_mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING  # as set; the job graph has it resolved
    # Where keyed state lives (a weir.runtime.state_backend.StateBackend; None: on
    # the heap). Typed Any: that module builds on state, which builds on this one.
    state_backend: Any = None

    # PyFlink's ``env.get_config()`` setters and getters.
    def set_parallelism(self, parallelism: int) -> "ExecutionConfig":
        self.parallelism = _whole("parallelism", parallelism)
        return self

    def get_parallelism(self) -> int:
        return self.parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "ExecutionConfig":
        self.max_parallelism = _whole("max_parallelism", max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self.max_parallelism

    def set_auto_watermark_interval(self, interval: int) -> "ExecutionConfig":
        """How often sources and ``assign_timestamps_and_watermarks`` emit watermarks, in ms (default 200)."""
        self.watermark_interval_ms = _whole("auto watermark interval_ms", interval)
        return self

    def get_auto_watermark_interval(self) -> int:
        return self.watermark_interval_ms
